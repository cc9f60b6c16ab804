package front

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// SetLanePaused implements ledger.LaneControls.
func (f *Front) SetLanePaused(ctx context.Context, lane string, paused bool, actor string) error {
	op := f.op("set lane paused")
	if err := store.LanePause(op, lane, actor); err != nil {
		return err
	}
	if err := f.check(op); err != nil {
		return err
	}
	return f.b.SetLanePaused(ctx, op, lane, paused, actor)
}

// LaneEvents implements ledger.LaneControls.
func (f *Front) LaneEvents(ctx context.Context, lane string, limit int) ([]ledger.LaneEvent, error) {
	op := f.op("lane events")
	limit, err := store.LaneEvents(op, lane, limit)
	if err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	out, err := f.b.LaneEvents(ctx, op, lane, limit)
	return nilIfEmpty(out), err
}

// PausedLanes implements ledger.LaneControls.
func (f *Front) PausedLanes(ctx context.Context) ([]ledger.LanePause, error) {
	op := f.op("paused lanes")
	if err := f.check(op); err != nil {
		return nil, err
	}
	out, err := f.b.PausedLanes(ctx, op)
	return nilIfEmpty(out), err
}

// RegisterServer implements ledger.Servers.
func (f *Front) RegisterServer(ctx context.Context, sv ledger.Server) error {
	op := f.op("register server")
	lanes, err := store.Server(op, &sv)
	if err != nil {
		return err
	}
	if err := f.check(op); err != nil {
		return err
	}
	return f.b.RegisterServer(ctx, op, sv, lanes)
}

// RemoveServer implements ledger.Servers.
func (f *Front) RemoveServer(ctx context.Context, id string) error {
	op := f.op("remove server")
	if err := store.Key(op, "server id", id); err != nil {
		return err
	}
	if err := f.check(op); err != nil {
		return err
	}
	return f.b.RemoveServer(ctx, op, id)
}

// PruneServers implements ledger.Servers.
func (f *Front) PruneServers(ctx context.Context, before time.Time) (int, error) {
	op := f.op("prune servers")
	if err := f.check(op); err != nil {
		return 0, err
	}
	return f.b.PruneServers(ctx, op, before)
}

// ListServers implements ledger.Servers.
func (f *Front) ListServers(ctx context.Context) ([]ledger.Server, error) {
	op := f.op("list servers")
	if err := f.check(op); err != nil {
		return nil, err
	}
	out, err := f.b.ListServers(ctx, op)
	return nilIfEmpty(out), err
}

// RecordHistory implements ledger.History.
func (f *Front) RecordHistory(ctx context.Context, server string, pts []ledger.HistoryPoint) error {
	op := f.op("record history")
	if err := store.History(op, server, pts); err != nil {
		return err
	}
	rows := store.HistoryRows(pts)
	if len(rows) == 0 {
		return nil
	}
	if err := f.check(op); err != nil {
		return err
	}
	return f.b.RecordHistory(ctx, op, server, rows)
}

// ListHistory implements ledger.History.
func (f *Front) ListHistory(ctx context.Context, since time.Time, lane string) ([]ledger.HistoryPoint, error) {
	op := f.op("list history")
	if err := f.check(op); err != nil {
		return nil, err
	}
	out, err := f.b.ListHistory(ctx, op, since, lane)
	return nilIfEmpty(out), err
}

// PruneHistory implements ledger.History.
func (f *Front) PruneHistory(ctx context.Context, before time.Time) (int, error) {
	op := f.op("prune history")
	if err := f.check(op); err != nil {
		return 0, err
	}
	return f.b.PruneHistory(ctx, op, before)
}

// Notify implements ledger.Notes.
func (f *Front) Notify(ctx context.Context, n ledger.Note) error {
	op := f.op("notify")
	if err := store.Note(op, n); err != nil {
		return err
	}
	if err := f.check(op); err != nil {
		return err
	}
	return f.b.Notify(ctx, op, n)
}

// WatchTask implements ledger.Watcher.
func (f *Front) WatchTask(ctx context.Context, id string) (*ledger.Task, error) {
	op := f.op("watch task")
	if err := store.ID(op, id); err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	return f.b.WatchTask(ctx, op, id)
}

// FollowTask implements ledger.Watcher.
func (f *Front) FollowTask(ctx context.Context, id string) (*ledger.Task, error) {
	op := f.op("follow task")
	if err := store.ID(op, id); err != nil {
		return nil, err
	}
	if err := f.check(op); err != nil {
		return nil, err
	}
	return f.b.FollowTask(ctx, op, id)
}

// Listen implements ledger.Notes.
func (f *Front) Listen(ctx context.Context) (<-chan ledger.Note, error) {
	op := f.op("listen")
	if err := f.check(op); err != nil {
		return nil, err
	}
	return f.b.Listen(ctx, op)
}
