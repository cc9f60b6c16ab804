package admin

import (
	"errors"
	"net/http"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// servers answers GET /api/v1/servers: the fleet (Ops.Servers). The
// servers run every tenant's work and name hosts and processes, so a
// tenant-scoped token is refused, as for /metrics.
func (h *handler) servers(r *http.Request, c *call) (int, any, error) {
	if c.scope.Tenant != "" {
		return 0, nil, &apiError{http.StatusForbidden, "a tenant-scoped token cannot list the servers: they serve every tenant"}
	}
	ss, err := h.ops.Servers(r.Context())
	if errors.Is(err, broker.ErrUnsupported) {
		return 0, nil, &apiError{http.StatusNotImplemented, "the ledger keeps no server registry"}
	}
	if err != nil {
		return 0, nil, err
	}
	live := 0
	for _, s := range ss {
		if s.State == ServerLive {
			live++
		}
	}
	return http.StatusOK, map[string]any{"servers": ss, "live": live, "gone": len(ss) - live, "at": time.Now().UTC()}, nil
}
