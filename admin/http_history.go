package admin

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// history answers GET /api/v1/history?lane=&minutes=: the processed /
// failed / dead counts per lane and minute (Ops.History). The counts
// cover every tenant, so a tenant-scoped token is refused, as for
// /metrics and /servers.
func (h *handler) history(r *http.Request, c *call) (int, any, error) {
	if c.scope.Tenant != "" {
		return 0, nil, &apiError{http.StatusForbidden, "a tenant-scoped token cannot read the history: its counts cover every tenant"}
	}
	q := r.URL.Query()
	minutes := 0
	if s := q.Get("minutes"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxHistoryMinutes {
			return 0, nil, badRequest("minutes must be an integer within 1..%d, got %q", MaxHistoryMinutes, s)
		}
		minutes = n
	}
	info, err := h.ops.History(r.Context(), q.Get("lane"), minutes)
	if errors.Is(err, broker.ErrUnsupported) {
		return 0, nil, &apiError{http.StatusNotImplemented, "the ledger keeps no task history"}
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, struct {
		*HistoryInfo
		At time.Time `json:"at"`
	}{info, time.Now().UTC()}, nil
}
