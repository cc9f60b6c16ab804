package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The outbox's notifications: migration 0008's trigger notifies channel
// OutboxChannel with the schema's name at every commit that adds outbox
// rows; a store listens on one connection of its own and wakes every
// relay listening through it.

// listener is the store's one LISTEN connection, shared by every relay
// that listens through the store (ListenOutbox): a process running many
// Servers on one ledger holds one connection for them all.
type listener struct {
	mu     sync.Mutex
	subs   map[chan struct{}]struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// ListenOutbox implements ledger.OutboxNotifier with LISTEN on a
// connection of its own (not one of the pool's), shared by every caller
// of this store, reconnecting after a loss with a backoff of up to 5s.
func (s *Store) ListenOutbox(ctx context.Context) (<-chan struct{}, error) {
	const op = "postgres: listen outbox"
	if err := s.check(op); err != nil {
		return nil, err
	}
	schema := s.opts.Schema
	if schema == "" {
		if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return nil, classify(op, err, false)
		}
	}
	ch := make(chan struct{}, 1)
	ch <- struct{}{} // a commit may have happened before this call
	l := &s.listen
	l.mu.Lock()
	if l.subs == nil {
		l.subs = map[chan struct{}]struct{}{}
	}
	l.subs[ch] = struct{}{}
	if l.cancel == nil {
		lctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go s.listenLoop(lctx, schema, l.done)
	}
	l.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-s.stopListen():
		}
		l.mu.Lock()
		delete(l.subs, ch)
		var wait chan struct{}
		if len(l.subs) == 0 && l.cancel != nil {
			l.cancel()
			l.cancel, wait = nil, l.done
		}
		// Closed under the lock: the loop sends only under it.
		close(ch)
		l.mu.Unlock()
		if wait != nil {
			<-wait
		}
	}()
	return ch, nil
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

func (s *Store) listenLoop(ctx context.Context, schema string, done chan struct{}) {
	defer close(done)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil && !s.closed.Load() {
		conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
		if err == nil {
			if _, err = conn.Exec(ctx, `LISTEN `+OutboxChannel); err == nil {
				backoff = 50 * time.Millisecond
				s.kickAll() // a commit may have happened while not listening
				for {
					n, werr := conn.WaitForNotification(ctx)
					if werr != nil {
						break
					}
					if n.Payload == schema {
						s.kickAll()
					}
				}
			}
			conn.Close(context.WithoutCancel(ctx))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
