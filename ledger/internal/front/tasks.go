package front

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// Create implements ledger.Ledger.
func (f *Front) Create(ctx context.Context, in *ledger.Task) (*ledger.Task, bool, error) {
	op := f.op("create")
	t, err := store.CreateTask(op, in, f.now())
	if err != nil {
		return nil, false, err
	}
	if err := f.check(op); err != nil {
		return nil, false, err
	}
	got, created, err := f.b.Create(ctx, op, t)
	if err != nil {
		return nil, false, err
	}
	if created {
		f.claims.Add(got.ID, got.Tenant, got.IdempotencyKey)
	}
	return got, created, nil
}

// validTasks validates task(i) for i < n (store.CreateTask, all at now)
// into ts, a task that does not validate getting its error in res and a
// nil entry in ts; valid counts the others.
func (f *Front) validTasks(op string, n int, task func(i int) *ledger.Task) (ts []*ledger.Task, res []ledger.CreateResult, valid int, now time.Time) {
	now = f.now()
	ts, res = make([]*ledger.Task, n), make([]ledger.CreateResult, n)
	for i := range n {
		c, err := store.CreateTask(op, task(i), now)
		if err != nil {
			res[i].Err = err
			continue
		}
		ts[i] = c
		valid++
	}
	return ts, res, valid, now
}

// addClaims remembers the keys of the tasks res created.
func (f *Front) addClaims(res []ledger.CreateResult) {
	for _, r := range res {
		if r.Created {
			f.claims.Add(r.Task.ID, r.Task.Tenant, r.Task.IdempotencyKey)
		}
	}
}

// CreateMany implements ledger.Ledger: a task that does not validate gets
// its error in its result; the others are recorded.
func (f *Front) CreateMany(ctx context.Context, in []*ledger.Task) ([]ledger.CreateResult, error) {
	op := f.op("create many")
	ts, res, valid, _ := f.validTasks(op, len(in), func(i int) *ledger.Task { return in[i] })
	if valid == 0 {
		return res, nil
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	if err := f.b.CreateMany(ctx, op, ts, res); err != nil {
		return nil, err
	}
	f.addClaims(res)
	return res, nil
}

// Get implements ledger.Ledger.
func (f *Front) Get(ctx context.Context, id string) (*ledger.Task, error) {
	op := f.op("get")
	if err := store.ID(op, id); err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	return f.b.Get(ctx, op, id)
}

// GetByKey implements ledger.Ledger.
func (f *Front) GetByKey(ctx context.Context, tenant, key string) (*ledger.Task, error) {
	op := f.op("get by key")
	if err := store.Key(op, "idempotency key", key); err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	return f.b.GetByKey(ctx, op, tenant, key)
}

// Transition implements ledger.Ledger.
func (f *Front) Transition(ctx context.Context, req ledger.TransitionRequest) (*ledger.Task, error) {
	op := f.op("transition")
	from, err := store.Transition(op, &req)
	if err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	return f.b.Transition(ctx, op, req, from)
}

// List implements ledger.Ledger.
func (f *Front) List(ctx context.Context, fl ledger.Filter) ([]*ledger.Task, error) {
	op := f.op("list")
	fl, err := store.Filter(op, fl)
	if err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	return f.b.List(ctx, op, fl)
}

// Prune implements ledger.Ledger. It also forgets dedup claims older than
// the dedup window.
func (f *Front) Prune(ctx context.Context, before time.Time) (int, error) {
	op := f.op("prune")
	if err := f.check(op); err != nil {
		return 0, err
	}
	return f.b.Prune(ctx, op, before)
}

// SchemaVersion returns the schema version the database is at.
func (f *Front) SchemaVersion(ctx context.Context) (int, error) {
	op := f.op("schema version")
	if err := f.check(op); err != nil {
		return 0, err
	}
	return f.b.SchemaVersion(ctx, op)
}
