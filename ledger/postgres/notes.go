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
