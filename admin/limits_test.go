package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
)

// TestHandler_IngestionRanges: times, delays and attempt limits that do not
// fit the framework's ranges (int64 nanoseconds wrap past 2262) are refused
// with 400 and enqueue nothing, instead of being accepted and run at once.
func TestHandler_IngestionRanges(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	bad := []struct{ name, body, want string }{
		{"run_at past 2262", `{"kind": "test.greet", "args": {"name": "x"}, "run_at": "2263-01-01T00:00:00Z"}`, "run_at"},
		{"run_at year 1", `{"kind": "test.greet", "args": {"name": "x"}, "run_at": "0001-06-01T00:00:00Z"}`, "run_at"},
		{"deadline 9999", `{"kind": "test.greet", "args": {"name": "x"}, "deadline": "9999-01-01T00:00:00Z"}`, "deadline"},
		{"delay that wraps", `{"kind": "test.greet", "args": {"name": "x"}, "delay": "2562047h"}`, "delay"},
		{"delay_ms that wraps", `{"kind": "test.greet", "args": {"name": "x"}, "delay_ms": 18446744073710}`, "delay_ms"},
		{"max_attempts too large", `{"kind": "test.greet", "args": {"name": "x"}, "max_attempts": 3000000000}`, "max_attempts"},
	}
	for i, c := range bad {
		r := e.Ingest(admintest.EnqueueSecret, "range-"+strings.Repeat("x", i+1), c.body)
		if r.Status != http.StatusBadRequest || !strings.Contains(r.ErrText(t), c.want) {
			t.Errorf("%s: %d %s, want 400 mentioning %q", c.name, r.Status, r.Body, c.want)
		}
	}
	if n, msgs := e.Totals(); n != 0 || msgs != 0 {
		t.Fatalf("after the bad requests: %d tasks in the ledger and %d messages in the broker, want none", n, msgs)
	}
}
