package ledger

import (
	"context"
	"time"
)

// HistoryPoint is one lane's task counts over one minute: what the
// dashboard's history chart draws.
//
// Processed counts the handler attempts that ended there, successful or
// not (as asynq's and Sidekiq's "processed" do); Failed the ones of them
// that failed (retried or dead-lettered); Dead the tasks dead-lettered,
// including those that never reached a handler (undecodable, unknown
// kind). Snoozes, returns at shutdown and parks for review or an event
// are not counted: they end no attempt's work.
type HistoryPoint struct {
	// Minute is the start of the minute (UTC, whole minutes).
	Minute time.Time
	Lane   string
	// The counts are never negative.
	Processed int64
	Failed    int64
	Dead      int64
}

// HistoryKeep is how long history points stay before the schedulers
// sharing the ledger prune them (History.PruneHistory).
const HistoryKeep = 24 * time.Hour

// MaxHistoryPoints bounds one RecordHistory call.
const MaxHistoryPoints = 10_000

// History is an optional interface of a Ledger: per-lane, per-minute task
// counts recorded by every scheduler sharing the ledger (a few rows per
// lane and minute, written once a heartbeat, never per task), so that an
// operator process that runs no worker (switchyard serve without workers,
// GET /api/v1/history, the dashboard) can chart the last hour. Both stores
// implement it; get it with HistoryOf, which sees through WithCodec
// (history carries no payloads).
type History interface {
	// RecordHistory writes server's counts for each point's minute
	// (truncated to the minute) and lane, replacing what server wrote
	// there before: a server records the running totals of its current
	// minutes, so writing them again (a retry after an unknown outcome)
	// counts nothing twice. An empty or over-long server, an invalid
	// lane, a negative count or more than MaxHistoryPoints points is
	// refused (broker.ErrInvalid).
	RecordHistory(ctx context.Context, server string, pts []HistoryPoint) error
	// ListHistory returns every server's counts summed per minute and
	// lane, for the minutes from since (truncated to the minute) on, by
	// minute then lane; lane "" means every lane. Minutes without counts
	// are absent.
	ListHistory(ctx context.Context, since time.Time, lane string) ([]HistoryPoint, error)
	// PruneHistory deletes the points of minutes before before, and says
	// how many rows it deleted.
	PruneHistory(ctx context.Context, before time.Time) (int, error)
}

// HistoryOf returns L's history store, or nil when it has none. It sees
// through WithCodec.
func HistoryOf(L Ledger) History {
	h, _ := unwrapTo[History](L)
	return h
}
