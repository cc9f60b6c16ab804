package admin

import (
	"context"
	"errors"
	"slices"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Cancelling tasks and reading their results (switchyard's Client.Cancel
// and Client.Result) with the operator's scope and actor. A bulk cancel
// works like the dead-letter operations: CancelPreview lists what a
// filter selects, CancelTasks acts on a filter — in practice on the IDs
// the preview showed, so that what was confirmed is what is cancelled.

// CancelFilter selects live tasks (queued, delayed, retrying, awaiting
// review or an event, or running) to cancel. Every field set must match.
type CancelFilter struct {
	Kind   string
	Lane   string
	Tenant string // combined with Scope: a scoped caller's tenant wins
	// Metadata pairs the task's metadata must all hold.
	Metadata map[string]string
	// IDs, when set, restricts the selection to these tasks.
	IDs []string
	// Max bounds how many tasks CancelTasks cancels (0: every match, up
	// to Config.MaxScan).
	Max int
}

func (f *CancelFilter) validate() error {
	if f.Kind != "" {
		if err := broker.ValidateName("kind", f.Kind); err != nil {
			return err
		}
	}
	if f.Lane != "" {
		if err := broker.ValidateName("lane", f.Lane); err != nil {
			return err
		}
	}
	for k := range f.Metadata {
		if k == "" {
			return broker.Invalidf("admin: empty metadata key in the filter")
		}
	}
	for _, id := range f.IDs {
		if id == "" {
			return broker.Invalidf("admin: empty task id in the filter")
		}
	}
	if f.Max < 0 {
		return broker.Invalidf("admin: negative max %d", f.Max)
	}
	return nil
}

// liveStates are the states a cancel applies to.
var liveStates = []ledger.State{ledger.Queued, ledger.RetryWait, ledger.AwaitingReview, ledger.AwaitingEvent, ledger.Running}

func (f *CancelFilter) match(sc Scope, t *ledger.Task) bool {
	if !sc.allows(t.Tenant) || f.Tenant != "" && t.Tenant != f.Tenant || f.Kind != "" && t.Kind != f.Kind || f.Lane != "" && t.Lane != f.Lane {
		return false
	}
	if !slices.Contains(liveStates, t.State) {
		return false
	}
	for k, v := range f.Metadata {
		if got, ok := t.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return len(f.IDs) == 0 || slices.Contains(f.IDs, t.ID)
}

// selectLive returns up to max live tasks f selects (truncated: there may
// be more).
func (o *Ops) selectLive(ctx context.Context, sc Scope, f CancelFilter, max int) (ts []*ledger.Task, truncated bool, err error) {
	if o.cfg.Ledger == nil {
		return nil, false, ErrNoLedger
	}
	if err := f.validate(); err != nil {
		return nil, false, err
	}
	tenant, ok := sc.tenant(f.Tenant)
	if !ok {
		return nil, false, nil
	}
	f.Tenant = tenant
	if len(f.IDs) > 0 {
		for _, id := range f.IDs {
			t, err := o.cfg.Ledger.Get(ctx, id)
			if errors.Is(err, ledger.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, false, err
			}
			if f.match(sc, t) && !slices.ContainsFunc(ts, func(x *ledger.Task) bool { return x.ID == t.ID }) {
				if len(ts) == max {
					return ts, true, nil
				}
				ts = append(ts, t)
			}
		}
		return ts, false, nil
	}
	after := ""
	for {
		page, err := o.cfg.Ledger.List(ctx, ledger.Filter{Tenant: tenant, States: liveStates, Kind: f.Kind, Lane: f.Lane, Limit: 1000, After: after})
		if err != nil {
			return nil, false, err
		}
		for _, t := range page {
			if f.match(sc, t) {
				if len(ts) == max {
					return ts, true, nil
				}
				ts = append(ts, t)
			}
		}
		if len(page) < 1000 {
			return ts, false, nil
		}
		after = page[len(page)-1].ID
	}
}

// CancelPreview lists up to limit (default 50, at most 1000) live tasks
// f selects, oldest first, without acting; truncated reports that more
// match.
func (o *Ops) CancelPreview(ctx context.Context, sc Scope, f CancelFilter, limit int) (ts []*ledger.Task, truncated bool, err error) {
	if limit < 0 {
		return nil, false, broker.Invalidf("admin: negative limit %d", limit)
	}
	if limit == 0 {
		limit = 50
	}
	ts, truncated, err = o.selectLive(ctx, sc, f, min(limit, 1000))
	if ts == nil && err == nil {
		ts = []*ledger.Task{}
	}
	return ts, truncated, err
}

// CancelTasks cancels every live task f selects (at most f.Max, and at
// most Config.MaxScan in one call: Report.Truncated says when more may
// match), recording reason and who in each task's event log. Tasks that
// finished meanwhile are skipped, not failures. p, when set, is told the
// progress.
func (o *Ops) CancelTasks(ctx context.Context, sc Scope, f CancelFilter, reason string, who Actor, p Progress) (*Report, error) {
	limit := o.cfg.MaxScan
	if f.Max > 0 {
		limit = min(f.Max, limit)
	}
	ts, truncated, err := o.selectLive(ctx, sc, f, limit)
	if err != nil {
		return nil, err
	}
	rep := &Report{Truncated: truncated && f.Max == 0}
	for i, t := range ts {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		_, err := o.client.CancelBy(ctx, t.ID, reason, who.String())
		switch {
		case err == nil:
			rep.Done++
		case errors.Is(err, switchyard.ErrFinished):
		default:
			rep.Failed = append(rep.Failed, ItemError{ID: t.ID, Err: err.Error()})
		}
		if p != nil {
			p(i+1, len(ts))
		}
	}
	return rep, nil
}

// CancelTask cancels one task in scope: ledger.ErrNotFound when it does
// not exist or is out of scope, a *switchyard.FinishedError (matching
// ledger.ErrConflict) when it already finished.
func (o *Ops) CancelTask(ctx context.Context, sc Scope, id, reason string, who Actor) (*ledger.Task, error) {
	if o.cfg.Ledger == nil {
		return nil, ErrNoLedger
	}
	if _, err := o.scopedTask(ctx, sc, id); err != nil {
		return nil, err
	}
	return o.client.CancelBy(ctx, id, reason, who.String())
}

// Result returns task id's result (switchyard.Client.Result) in scope.
func (o *Ops) Result(ctx context.Context, sc Scope, id string) (*switchyard.Result, error) {
	if o.cfg.Ledger == nil {
		return nil, ErrNoLedger
	}
	if _, err := o.scopedTask(ctx, sc, id); err != nil {
		return nil, err
	}
	return o.client.Result(ctx, id)
}
