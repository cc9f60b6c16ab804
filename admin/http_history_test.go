package admin_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestHandler_History: the test environment's running Server counts the
// tasks it finishes and writes them to the ledger's history once a
// heartbeat; GET /api/v1/history shows them per lane and minute over the
// last hour (dense series, one entry a minute, the current minute last),
// with totals: three greetings processed in interactive; a flaky task
// that fails both its attempts processed twice, failed twice and dead
// once in batch. A lane filter narrows it; minutes out of range and
// unknown lanes are 400s; tenant-scoped, enqueue-only and anonymous
// callers are refused.
func TestHandler_History(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	var ids []string
	for _, n := range []string{"ann", "bob", "cy"} {
		ids = append(ids, e.Enqueue(admintest.GreetArgs{Name: n}, &switchyard.EnqueueOpts{Lane: "interactive"}))
	}
	flaky := e.Enqueue(admintest.FlakyArgs{Item: "h-1"}, &switchyard.EnqueueOpts{Lane: "batch"})
	for _, id := range ids {
		e.WaitState(id, ledger.Completed)
	}
	e.WaitDead("batch", flaky, 1)

	var b admintest.HistoryBody
	for deadline := time.Now().Add(30 * time.Second); ; {
		var r admintest.Resp
		b, r = e.History("history")
		if r.Status != http.StatusOK {
			t.Fatalf("GET history: %d %s", r.Status, r.Body)
		}
		if b.Total.ProcessedTotal == 5 && b.Total.DeadTotal == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("history never showed the tasks: %+v", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if b.Minutes != 60 || b.StepMS != 60000 || b.To.Sub(b.From) != time.Hour ||
		b.To.Before(time.Now()) || b.To.After(time.Now().Add(time.Minute+time.Second)) {
		t.Errorf("range: minutes %d step %v from %v to %v", b.Minutes, b.StepMS, b.From, b.To)
	}
	lanes := map[string]admin.HistorySeries{}
	for _, s := range b.Lanes {
		if len(s.Processed) != 60 || len(s.Failed) != 60 || len(s.Dead) != 60 {
			t.Errorf("lane %s: series of %d/%d/%d entries, want 60", s.Lane, len(s.Processed), len(s.Failed), len(s.Dead))
		}
		lanes[s.Lane] = s
	}
	in, ba := lanes["interactive"], lanes["batch"]
	if len(lanes) != 2 || in.ProcessedTotal != 3 || in.FailedTotal != 0 || in.DeadTotal != 0 ||
		ba.ProcessedTotal != 2 || ba.FailedTotal != 2 || ba.DeadTotal != 1 {
		t.Errorf("lanes = %+v", b.Lanes)
	}
	if b.Total.FailedTotal != 2 {
		t.Errorf("total = %+v", b.Total)
	}
	// The counts sit in the last minutes (the test ran within a minute or two).
	var recent int64
	for i := 57; i < 60; i++ {
		recent += b.Total.Processed[i]
	}
	if recent != 5 {
		t.Errorf("processed over the last three minutes = %d, want 5: %v", recent, b.Total.Processed)
	}

	// One lane, fewer minutes.
	one, r := e.History("history?lane=batch&minutes=5")
	if r.Status != http.StatusOK || one.Minutes != 5 || len(one.Lanes) != 1 || one.Lanes[0].Lane != "batch" ||
		len(one.Total.Processed) != 5 || one.Total.ProcessedTotal != 2 || one.Total.DeadTotal != 1 {
		t.Errorf("GET history?lane=batch&minutes=5: %d %s", r.Status, r.Body)
	}
	// A known lane without counts has a zero series.
	zero, r := e.History("history?lane=scheduled")
	if r.Status != http.StatusOK || len(zero.Lanes) != 1 || zero.Lanes[0].ProcessedTotal != 0 || len(zero.Lanes[0].Processed) != 60 {
		t.Errorf("GET history?lane=scheduled: %d %s", r.Status, r.Body)
	}

	for _, c := range []struct {
		path, token string
		status      int
		msg         string
	}{
		{"history?minutes=0", admintest.ReadSecret, http.StatusBadRequest, "minutes"},
		{"history?minutes=1441", admintest.ReadSecret, http.StatusBadRequest, "minutes"},
		{"history?minutes=abc", admintest.ReadSecret, http.StatusBadRequest, "minutes"},
		{"history?lane=nosuchlane", admintest.ReadSecret, http.StatusBadRequest, "unknown lane"},
		{"history?lane=bad%20lane", admintest.ReadSecret, http.StatusBadRequest, "lane"},
		{"history", "", http.StatusUnauthorized, "authentication required"},
		{"history", admintest.EnqueueSecret, http.StatusForbidden, "role"},
		{"history", admintest.AcmeSecret, http.StatusForbidden, "tenant-scoped"},
	} {
		r := e.Call("GET", c.path, c.token, nil, nil)
		if r.Status != c.status || !strings.Contains(string(r.Body), c.msg) {
			t.Errorf("GET %s with %q: %d %s, want %d containing %q", c.path, c.token, r.Status, r.Body, c.status, c.msg)
		}
	}
}

// TestOps_HistoryNoLedger: without a ledger the history is ErrNoLedger,
// not an empty chart.
func TestOps_HistoryNoLedger(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(t.Context(), "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ops, err := admin.New(admin.Config{Broker: b})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ops.History(t.Context(), "", 0); !errors.Is(err, admin.ErrNoLedger) {
		t.Errorf("History without a ledger: %v, want ErrNoLedger", err)
	}
}
