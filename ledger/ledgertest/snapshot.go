package ledgertest

import (
	"context"
	"testing"

	"github.com/switchyard-dev/switchyard/ledger"
)

// TaskRecord is what a ledger says of one task: the task, its events and
// its attempts, as Snapshot reads them.
type TaskRecord struct {
	Task     *ledger.Task
	Events   []ledger.Event
	Attempts []ledger.Attempt
}

// Snapshot reads the records of the tasks ids from L (Get, Events,
// Attempts), failing t on any error: a schema migration's tests take one
// before and one after and compare them with reflect.DeepEqual.
func Snapshot(ctx context.Context, t testing.TB, L ledger.Ledger, ids []string) map[string]TaskRecord {
	t.Helper()
	out := make(map[string]TaskRecord, len(ids))
	for _, id := range ids {
		tk, err := L.Get(ctx, id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		es, err := L.Events(ctx, id)
		if err != nil {
			t.Fatalf("events of %s: %v", id, err)
		}
		as, err := L.Attempts(ctx, id)
		if err != nil {
			t.Fatalf("attempts of %s: %v", id, err)
		}
		out[id] = TaskRecord{Task: tk, Events: es, Attempts: as}
	}
	return out
}
