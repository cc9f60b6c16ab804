package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// The outbox's notifications: migration 0008's trigger notifies channel
// OutboxChannel with the schema's name at every commit that adds outbox
// rows; the store's one LISTEN connection (notes.go), shared with the
// ledger.Notes listeners, wakes every relay listening through the store.

// listener holds the relays listening through the store (ListenOutbox):
// a process running many Servers on one ledger holds one connection for
// them all, and for its note listeners.
type listener struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// ListenOutbox implements ledger.OutboxNotifier with LISTEN on the
// store's LISTEN connection (not one of the pool's; the one ledger.Notes
// listeners use), shared by every caller of this store, reconnecting
// after a loss.
func (s *Store) ListenOutbox(ctx context.Context) (<-chan struct{}, error) {
	const op = "postgres: listen outbox"
	if err := s.check(op); err != nil {
		return nil, err
	}
	if _, err := s.schemaName(ctx, s.pool); err != nil {
		return nil, classify(op, err, false)
	}
	h := s.noteHub()
	if h == nil {
		return nil, store.Closed(op)
	}
	ch := make(chan struct{}, 1)
	ch <- struct{}{} // a commit may have happened before this call
	l := &s.listen
	l.mu.Lock()
	if l.subs == nil {
		l.subs = map[chan struct{}]struct{}{}
	}
	l.subs[ch] = struct{}{}
	l.mu.Unlock()
	// The hold ends with ctx or the store; the hub closes with the store.
	hctx, cancel := context.WithCancel(ctx)
	if err := h.Hold(hctx, op); err != nil {
		cancel()
		l.mu.Lock()
		delete(l.subs, ch)
		l.mu.Unlock()
		return nil, err
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-s.stopListen():
		}
		cancel()
		l.mu.Lock()
		delete(l.subs, ch)
		// Closed under the lock: kickAll sends only under it.
		close(ch)
		l.mu.Unlock()
	}()
	return ch, nil
}

// schemaName returns the ledger's schema: Options.Schema, else the
// connection's current_schema() (read once).
func (s *Store) schemaName(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (string, error) {
	if s.opts.Schema != "" {
		return s.opts.Schema, nil
	}
	s.notes.chanMu.Lock()
	defer s.notes.chanMu.Unlock()
	if s.notes.schema != "" {
		return s.notes.schema, nil
	}
	var schema string
	if err := q.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return "", err
	}
	s.notes.schema = schema
	return schema, nil
}

// stopListen is closed when the store closes.
func (s *Store) stopListen() chan struct{} {
	s.listenStopOnce.Do(func() { s.listenStop = make(chan struct{}) })
	return s.listenStop
}

// kickAll tells every listening relay to look.
func (s *Store) kickAll() {
	l := &s.listen
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
