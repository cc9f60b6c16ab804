package front

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// BeginRun implements ledger.Ledger.
func (f *Front) BeginRun(ctx context.Context, req ledger.RunStart) (*ledger.Task, error) {
	op := f.op("begin run")
	if err := store.RunStart(op, &req); err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	return f.b.BeginRun(ctx, op, req)
}

// EndRun implements ledger.Ledger.
func (f *Front) EndRun(ctx context.Context, req ledger.RunEnd) (*ledger.Task, error) {
	op := f.op("end run")
	from, err := store.RunEnd(op, &req)
	if err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	return f.b.EndRun(ctx, op, req, from)
}

// RenewLeases implements ledger.Ledger.
func (f *Front) RenewLeases(ctx context.Context, leases []ledger.Lease, d time.Duration) ([]string, error) {
	op := f.op("renew leases")
	if err := store.Leases(op, leases, d); err != nil {
		return nil, err
	}
	if len(leases) == 0 {
		return nil, nil
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	return f.b.RenewLeases(ctx, op, leases, d)
}
