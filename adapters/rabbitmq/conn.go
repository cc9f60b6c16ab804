package rabbitmq

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

// session is one connection generation. Channels opened on it die with it.
type session struct {
	conn *amqp.Connection
	gen  uint64
	done chan struct{} // closed when the connection closes
}

// connManager owns the connection and re-establishes it with backoff after
// the broker closes it. While it is down, operations fail with transient
// errors instead of hanging.
type connManager struct {
	cfg *config
	log *slog.Logger

	mu      sync.Mutex
	cur     *session      // nil while down
	up      chan struct{} // closed when cur becomes non-nil
	gen     uint64
	closing chan struct{}
	wg      sync.WaitGroup
}

func newConnManager(ctx context.Context, cfg *config, log *slog.Logger) (*connManager, error) {
	m := &connManager{cfg: cfg, log: log, up: make(chan struct{}), closing: make(chan struct{})}
	s, err := m.dial(ctx)
	if err != nil {
		return nil, err
	}
	m.install(s)
	return m, nil
}

// dial opens one connection, honouring ctx.
func (m *connManager) dial(ctx context.Context) (*session, error) {
	type result struct {
		c   *amqp.Connection
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := amqp.DialConfig(m.cfg.dialURL(), m.cfg.amqpConfig())
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, classify("connect to "+m.cfg.addr, r.err)
		}
		m.mu.Lock()
		m.gen++
		s := &session{conn: r.c, gen: m.gen, done: make(chan struct{})}
		m.mu.Unlock()
		return s, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, classify("connect to "+m.cfg.addr, ctx.Err())
	}
}

// install makes s current and watches it; when it closes, reconnect starts.
func (m *connManager) install(s *session) {
	notify := s.conn.NotifyClose(make(chan *amqp.Error, 1))
	m.mu.Lock()
	m.cur = s
	close(m.up)
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		var reason *amqp.Error
		select {
		case reason = <-notify:
		case <-m.closing:
			return
		}
		m.mu.Lock()
		if m.cur == s {
			m.cur = nil
			m.up = make(chan struct{})
		}
		m.mu.Unlock()
		close(s.done)
		select {
		case <-m.closing:
			return
		default:
		}
		if reason != nil {
			m.log.Warn("rabbitmq: connection closed; reconnecting", "addr", m.cfg.addr, "code", reason.Code, "reason", reason.Reason)
		} else {
			m.log.Warn("rabbitmq: connection closed; reconnecting", "addr", m.cfg.addr)
		}
		m.reconnect()
	}()
}

// reconnect dials with exponential backoff (50 ms doubling to 5 s, with
// jitter) until it succeeds or the manager closes.
func (m *connManager) reconnect() {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.connectTimeout)
		go func() {
			select {
			case <-m.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		s, err := m.dial(ctx)
		cancel()
		if err == nil {
			select {
			case <-m.closing:
				s.conn.Close()
				return
			default:
			}
			m.log.Info("rabbitmq: reconnected", "addr", m.cfg.addr, "attempts", attempt)
			m.install(s)
			return
		}
		if attempt == 1 || attempt%10 == 0 {
			m.log.Warn("rabbitmq: reconnect failed", "addr", m.cfg.addr, "attempt", attempt, "err", err)
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-m.closing:
			return
		case <-time.After(sleep):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// current returns the live session, or a transient error while down.
func (m *connManager) current(op string) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.closing:
		return nil, broker.ClosedError(op)
	default:
	}
	if m.cur == nil {
		return nil, notConnected(op)
	}
	return m.cur, nil
}

// await waits until the connection is up, ctx ends or until passes.
func (m *connManager) await(ctx context.Context, op string, until time.Time) (*session, error) {
	for {
		s, err := m.current(op)
		if err == nil || broker.ClassOf(err) == broker.Permanent {
			return s, err
		}
		m.mu.Lock()
		up := m.up
		m.mu.Unlock()
		wait := time.Until(until)
		if wait <= 0 {
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-up:
			t.Stop()
		case <-t.C:
			return nil, err
		case <-ctx.Done():
			t.Stop()
			return nil, classify(op, ctx.Err())
		case <-m.closing:
			t.Stop()
			return nil, broker.ClosedError(op)
		}
	}
}

func (m *connManager) close() {
	m.mu.Lock()
	select {
	case <-m.closing:
		m.mu.Unlock()
		return
	default:
	}
	close(m.closing)
	s := m.cur
	m.cur = nil
	m.mu.Unlock()
	if s != nil {
		s.conn.Close()
	}
	m.wg.Wait()
}

// rpc runs a blocking channel method so that ctx can end the wait.
// amqp091-go's synchronous methods take no context: on cancellation the
// wait is abandoned and f goes on until the broker answers (or the
// connection dies, which the heartbeat bounds).
//
// The channel is never closed here. It used to be, and that broke the
// channels it was used on: a consumer's channel carries the leases of
// every delivery it received, so closing it because one Receive gave up
// made RabbitMQ requeue all of them (their Acks failed, and a nacked
// message that had already been republished came back twice); and
// Channel.Close sends channel.close while other goroutines may still send
// basic.ack, basic.nack or an RPC on the same channel (amqp091-go marks the
// channel closed only when close-ok arrives), so a frame reached a channel
// the broker had already forgotten and RabbitMQ closed the whole
// connection with 504 CHANNEL_ERROR "expected 'channel.open'".
//
// A caller must not start another RPC on the channel until f has returned
// (two waiters would take each other's replies): the consumers' and the
// administrative channel's operations run in detached, which waits for
// them, so rpc's early return only serves callers that leave the channel
// for good (Close).
func rpc(ctx context.Context, op string, f func() error) error {
	if ctx.Done() == nil {
		return classify(op, f())
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return classify(op, err)
	case <-ctx.Done():
		return classify(op, ctx.Err())
	}
}

// detached runs f to its end in a goroutine of its own, with a context that
// keeps ctx's values but not its cancellation, and waits for it until ctx
// ends. f runs its channel methods to completion and so leaves the channel
// and the bookkeeping around it consistent whether or not its caller is
// still waiting. If the caller has left when f returns, abandoned (when not
// nil) gets f's results to undo what no one will take (return deliveries
// to the buffer, close a channel no one adopted).
func detached[T any](ctx context.Context, op string, f func(ctx context.Context) (T, error), abandoned func(T, error)) (T, error) {
	if ctx.Done() == nil {
		return f(ctx)
	}
	type result struct {
		v   T
		err error
	}
	var mu sync.Mutex
	gone := false
	done := make(chan result, 1)
	go func() {
		v, err := f(context.WithoutCancel(ctx))
		mu.Lock()
		defer mu.Unlock()
		if gone {
			if abandoned != nil {
				abandoned(v, err)
			}
			return
		}
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-done: // finished meanwhile: the caller takes it
		return r.v, r.err
	default:
		gone = true
	}
	var zero T
	return zero, classify(op, ctx.Err())
}
