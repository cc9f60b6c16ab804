package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// The control channel (ledger.Notes) of the PostgreSQL store is
// LISTEN/NOTIFY on one channel per schema, 'sy_' followed by the first 16
// hex digits of md5(schema) (migration 0006's trigger notifies on it). A
// note reaches listeners when the transaction that sends it commits; one
// connection per Store, outside the pool and open while anyone listens,
// receives them for every listener of the process. A dropped connection
// is re-opened and its listeners are sent a ledger.TopicGap.
//
// PostgreSQL signals every backend that LISTENs in the database at each
// commit that notifies, whatever the channel (each reads the queue, in a
// transaction of its own), so a note costs every listening process,
// wanted or not: EndRun notes a task's end only when someone watches it
// (WatchTask below).
//
// A listener that wants every task's moves (a live view of all tasks)
// does not get them from the notes: it reads the ledger (List).

var _ ledger.Notes = (*Store)(nil)

type notes struct {
	once    sync.Once
	hub     *store.Hub
	chanMu  sync.Mutex
	channel string
}

// noteChannel returns the schema's channel name.
func (s *Store) noteChannel(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (string, error) {
	s.notes.chanMu.Lock()
	defer s.notes.chanMu.Unlock()
	if s.notes.channel != "" {
		return s.notes.channel, nil
	}
	var c string
	if err := q.QueryRow(ctx, `SELECT 'sy_' || left(md5(current_schema()), 16)`).Scan(&c); err != nil {
		return "", err
	}
	s.notes.channel = c
	return c, nil
}

// Notify implements front.Backend.
func (s backend) Notify(ctx context.Context, op string, n ledger.Note) error {
	c, err := s.noteChannel(ctx, s.pool)
	if err != nil {
		return classify(op, err, false)
	}
	_, err = s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, c, ledger.EncodeNote(n))
	return classify(op, err, false)
}

var _ ledger.Watcher = (*Store)(nil)

// EndRun's statements send a task's state note only when its row is
// watched (migration 0016; endNoteJoin), or for a move to cancelled.
//
// watchTaskSQL marks task $1 watched unless it is already, or terminal:
// an update of its row, which waits for a concurrent EndRun's row lock
// and then reads the row's latest version. When it updates nothing, the
// row as the statement's snapshot has it is returned with its mark — and
// that answer stands only if the task is terminal or watched there: a
// watched mark the snapshot sees was committed before it, so an EndRun
// that locked the row after that sees it and notes, and one that locked
// it before committed before the mark did (the mark waited for it), and
// so before the snapshot. A row the snapshot has unmarked and live was
// changed meanwhile by another transaction (the update waited and
// skipped it): WatchTask asks again.
//
// followTaskSQL (FollowTask) marks the task whatever its state, a
// terminal one too: its answer stands only when watched.
var watchTaskSQL, followTaskSQL = watchSQL(` AND state NOT IN ('completed', 'failed', 'dead', 'rejected', 'cancelled')`), watchSQL("")

func watchSQL(live string) string {
	return `WITH u AS (
		UPDATE ledger_tasks SET watched = true
		WHERE id = $1 AND NOT watched` + live + `
		RETURNING ` + taskCols + `)
	SELECT ` + taskCols + `, true FROM u
	UNION ALL
	SELECT ` + taskCols + `, watched FROM ledger_tasks WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM u)`
}

// scanExtra is a row whose Scan fills extra after the caller's
// destinations.
type scanExtra struct {
	pgx.Row
	extra []any
}

func (r scanExtra) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.extra...)...) }

// WatchTask implements front.Backend: one statement (watchTaskSQL), asked
// again (at most a few times, then the row is marked whatever its state)
// when a concurrent move made its answer unusable.
func (s backend) WatchTask(ctx context.Context, op, id string) (*ledger.Task, error) {
	return s.watchTask(ctx, op, id, false)
}

// FollowTask implements front.Backend: WatchTask's statement without its
// exception for a terminal task (followTaskSQL), so that a later run's
// end (after a replay) notes too.
func (s backend) FollowTask(ctx context.Context, op, id string) (*ledger.Task, error) {
	return s.watchTask(ctx, op, id, true)
}

func (s backend) watchTask(ctx context.Context, op, id string, follow bool) (*ledger.Task, error) {
	q := watchTaskSQL
	if follow {
		q = followTaskSQL
	}
	for range 3 {
		var watched bool
		t, err := scanTask(scanExtra{s.pool.QueryRow(ctx, q, id), []any{&watched}})
		if isNoRows(err) {
			return nil, store.NotFound(op, "task %s", id)
		}
		if err != nil {
			return nil, classify(op, err, false)
		}
		if watched || !follow && t.State.Terminal() {
			return t, nil
		}
	}
	t, err := scanTask(s.pool.QueryRow(ctx, `UPDATE ledger_tasks SET watched = true WHERE id = $1 RETURNING `+taskCols, id))
	if isNoRows(err) {
		return nil, store.NotFound(op, "task %s", id)
	}
	return t, classify(op, err, false)
}

// Listen implements front.Backend.
func (s backend) Listen(ctx context.Context, op string) (<-chan ledger.Note, error) {
	s.notes.once.Do(func() { s.notes.hub = &store.Hub{Run: s.listenNotes} })
	if s.notes.hub == nil {
		return nil, store.Closed(op)
	}
	return s.notes.hub.Listen(ctx, op)
}

// listenNotes is the hub's source: a connection of its own that LISTENs
// on the schema's channel until ctx ends or the connection fails.
func (s *Store) listenNotes(ctx context.Context, ready func(), emit func(ledger.Note)) {
	cfg := s.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	c, err := s.noteChannel(ctx, conn)
	if err != nil {
		return
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{c}.Sanitize()); err != nil {
		return
	}
	ready()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return
		}
		if note, ok := ledger.DecodeNote(n.Payload); ok {
			emit(note)
		}
	}
}
