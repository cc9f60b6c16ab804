// Package front is the validating layer shared by the ledger's SQL
// stores (ledger/sqlite, ledger/postgres), as broker.Broker is over the
// broker drivers: a Front implements the stores' public methods once —
// argument validation, the closed-store check, defaults and result
// shaping — and calls a Backend, which each store implements with only
// its SQL.
//
// A store embeds a Front (through an unexported alias, so that no
// exported field appears) and gets its methods promoted: the store's
// method set is the public API. A store method of the same name shadows
// the Front's.
//
// Every Front method runs, in this order: validation (store.ID,
// store.CreateTask, …, the op's error naming the store), the short
// cuts that need no database (an empty batch), the closed check
// (broker.ErrClosed), then the Backend method of the same name with the
// validated arguments. A Backend method may assume what its Front method
// checked; it still checks for Close racing with it where its store
// needs to (the SQLite writer does).
package front

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// Front is the validating front of one store. Init prepares it; the zero
// value is not usable.
type Front struct {
	b      Backend
	name   string
	ops    sync.Map // operation name → its errors' Op, "<store>: <operation>"
	closed *atomic.Bool
	now    func() time.Time
	// claims: the keys of tasks this store just created, for Claim.
	claims store.Claims
	seq    seqFront
}

// Init prepares f for the store named name ("sqlite", "postgres": the
// prefix of its errors' Op), with backend b, the store's closed flag
// (set by its Close) and clock now.
func Init(f *Front, name string, b Backend, closed *atomic.Bool, now func() time.Time) {
	f.b, f.name, f.closed, f.now = b, name, closed, now
	f.ops.Clear()
	f.seq = seqFront{f}
}

// op returns the Op of the errors of operation name: "<store>: <name>",
// built once per name, so that no call builds a string.
func (f *Front) op(name string) string {
	if op, ok := f.ops.Load(name); ok {
		return op.(string)
	}
	op, _ := f.ops.LoadOrStore(name, f.name+": "+name)
	return op.(string)
}

// check returns broker.ErrClosed once the store is closed.
func (f *Front) check(op string) error {
	if f.closed.Load() {
		return store.Closed(op)
	}
	return nil
}
