package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// The control channel (ledger.Notes) of the SQLite store is the table
// ledger_notes (migration 0006): a note is a row, written in the
// transaction that causes it (a trigger on ledger_events writes the
// state notes); one goroutine per Store, running while anyone listens,
// reads the rows past the last one it saw every Options.NotifyInterval
// and hands them to every listener. A note therefore reaches a listener
// in another process (or this one) within NotifyInterval of its commit,
// half of it on average: docs/BENCHMARKS.md has the measured
// cancel-to-handler delay. The cost is one indexed read per interval per
// listening process, and one row per terminal move and per stream append
// (AppendStream's ledger.TopicStream note, in its transaction).

// DefaultNotifyInterval is Options.NotifyInterval's default.
const DefaultNotifyInterval = 50 * time.Millisecond

// noteKeep is how long a note row is kept: a listener further behind
// than that has been told of a gap anyway.
const noteKeep = time.Minute

var _ ledger.Notes = (*Store)(nil)

// Notify implements front.Backend.
func (s backend) Notify(ctx context.Context, op string, n ledger.Note) error {
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.txExec(ctx, tx, `INSERT INTO ledger_notes (at, topic, task_id, state, detail) VALUES (?, ?, ?, ?, ?)`,
			s.opts.Now().UnixNano(), n.Topic, n.TaskID, string(n.State), n.Detail)
		return err
	})
}

var _ ledger.Watcher = (*Store)(nil)

// WatchTask implements front.Backend. This store writes the state note
// of every task's move (a superset of the watched ones), so a watch needs
// no mark: it is Get.
func (s backend) WatchTask(ctx context.Context, op, id string) (*ledger.Task, error) {
	return s.Get(ctx, op, id)
}

// FollowTask implements front.Backend: Get, as WatchTask.
func (s backend) FollowTask(ctx context.Context, op, id string) (*ledger.Task, error) {
	return s.Get(ctx, op, id)
}

// Listen implements front.Backend.
func (s backend) Listen(ctx context.Context, op string) (<-chan ledger.Note, error) {
	s.hubOnce.Do(func() { s.hub = &store.Hub{Run: s.pollNotes} })
	if s.hub == nil { // closed first
		return nil, store.Closed(op)
	}
	return s.hub.Listen(ctx, op)
}

// pollNotes is the hub's source: it reads new note rows every
// NotifyInterval until ctx ends, and prunes old ones now and then. It
// returns on a read error (the hub sends a gap and starts it again).
func (s *Store) pollNotes(ctx context.Context, ready func(), emit func(ledger.Note)) {
	var last int64
	if err := s.r.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM ledger_notes`).Scan(&last); err != nil {
		return
	}
	ready()
	tick := time.NewTicker(s.opts.NotifyInterval)
	defer tick.Stop()
	nextPrune := time.Now().Add(noteKeep / 2)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for {
			n, err := s.readNotes(ctx, &last, emit)
			if err != nil {
				return
			}
			if n < 500 {
				break
			}
		}
		if time.Now().After(nextPrune) {
			nextPrune = time.Now().Add(noteKeep / 2)
			cut := s.opts.Now().Add(-noteKeep).UnixNano()
			_ = s.write(ctx, "sqlite: prune notes", func(ctx context.Context, tx *sql.Tx) error {
				_, err := s.txExec(ctx, tx, `DELETE FROM ledger_notes WHERE at < ?`, cut)
				return err
			})
		}
	}
}

func (s *Store) readNotes(ctx context.Context, last *int64, emit func(ledger.Note)) (int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT seq, topic, task_id, state, detail FROM ledger_notes WHERE seq > ? ORDER BY seq LIMIT 500`, *last)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			seq   int64
			note  ledger.Note
			state string
		)
		if err := rows.Scan(&seq, &note.Topic, &note.TaskID, &state, &note.Detail); err != nil {
			return n, err
		}
		note.State = ledger.State(state)
		*last = seq
		n++
		emit(note)
	}
	return n, rows.Err()
}
