package switchyard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// RelayConfig tunes the outbox relay that publishes the tasks of
// EnqueueTx and of reliable push (ClientConfig.ReliablePush). Every Server
// whose ledger has an outbox runs a relay while it runs; a Client runs one
// from its first outbox write until Close. Relays of any number of
// processes share one outbox: each claims rows by lease. A nil
// *RelayConfig means the defaults.
type RelayConfig struct {
	// PollInterval is how often the relay looks for rows when nothing told
	// it of any. Defaults to 1s on a store that notifies relays of commits
	// (PostgreSQL's LISTEN/NOTIFY: the poll is only a safety net), 50ms
	// on one that does not (SQLite: a committed task waits up to this
	// long).
	PollInterval time.Duration
	// Batch is how many rows one claim takes and one broker publish
	// carries. Defaults to 256.
	Batch int
	// Lease is how long a claimed row stays this relay's: a relay that
	// dies after publishing a row and before deleting it leaves the row to
	// be published again once its lease has passed. The copy carries the
	// task's ID, and the runtime runs the task once. Publishes are bounded
	// by half of it. Defaults to 30s.
	Lease time.Duration
	// MaxRetryDelay caps the backoff between tries of a row whose publish
	// failed (the broker is down, say): 100ms, doubling per try. Defaults
	// to 5s.
	MaxRetryDelay time.Duration
	// Logger receives the relay's errors. Defaults to slog.Default().
	Logger *slog.Logger
	// Off turns this process's relay off: its outbox writes are published
	// by the relays of other processes (a Server's, say). Defaults to
	// false.
	Off bool
}

func (c *RelayConfig) withDefaults(notifies bool) RelayConfig {
	var r RelayConfig
	if c != nil {
		r = *c
	}
	if r.PollInterval <= 0 {
		r.PollInterval = 50 * time.Millisecond
		if notifies {
			r.PollInterval = time.Second
		}
	}
	if r.Batch <= 0 {
		r.Batch = 256
	}
	if r.Lease <= 0 {
		r.Lease = 30 * time.Second
	}
	if r.MaxRetryDelay <= 0 {
		r.MaxRetryDelay = 5 * time.Second
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	return r
}

// ReasonPublishRefused is the reason of the ledger event of a task the
// relay moved to dead because the broker refused its message for good
// (too large for it, say): the task cannot be published as it is.
const ReasonPublishRefused = "publish_refused"

// relay publishes committed outbox rows.
type relay struct {
	b     *broker.Broker
	l     ledger.Ledger
	o     ledger.Outbox
	cfg   RelayConfig
	owner string
	off   bool // RelayConfig.Off: start does nothing
	kick  chan struct{}

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// newRelay returns the relay of l's outbox, or nil when l has none.
func newRelay(b *broker.Broker, l ledger.Ledger, cfg *RelayConfig) *relay {
	if l == nil {
		return nil
	}
	o := ledger.OutboxOf(l)
	if o == nil {
		return nil
	}
	_, notifies := o.(ledger.OutboxNotifier)
	host, _ := os.Hostname()
	return &relay{b: b, l: l, o: o, cfg: cfg.withDefaults(notifies), off: cfg != nil && cfg.Off,
		owner: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), broker.NewID()), kick: make(chan struct{}, 1)}
}

// start runs the relay until stop; a second start does nothing.
func (r *relay) start() {
	if r == nil || r.off {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		r.loop(ctx)
	}()
}

// stop ends the relay and waits for it (bounded by ctx). A row it holds
// is published again by another relay once its lease has passed.
func (r *relay) stop(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel = nil
	r.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// running reports whether the relay has been started and not stopped.
func (r *relay) running() bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancel != nil
}

// nudge makes the relay look for rows now.
func (r *relay) nudge() {
	if r == nil {
		return
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// After a notification, and for as long as it finds rows after one, the
// relay looks again every hotPoll for hotFor: a store that notifies may
// leave the wake-up of commits landing together to one of them
// (PostgreSQL's trigger does), and those land within milliseconds of it.
const (
	hotPoll = 10 * time.Millisecond
	hotFor  = 100 * time.Millisecond
)

func (r *relay) loop(ctx context.Context) {
	var notes <-chan struct{}
	if n, ok := r.o.(ledger.OutboxNotifier); ok {
		ch, err := n.ListenOutbox(ctx)
		if err != nil {
			r.cfg.Logger.Warn("switchyard: outbox relay cannot listen for commits; polling", "err", err)
		}
		notes = ch
	}
	var hotUntil time.Time
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case _, ok := <-notes:
			if !ok {
				notes = nil
				break
			}
			hotUntil = time.Now().Add(hotFor)
		case <-t.C:
		}
		n, err := r.drain(ctx)
		if err != nil {
			if errors.Is(err, broker.ErrClosed) {
				return // the ledger or the broker was closed under us
			}
			if ctx.Err() == nil {
				r.cfg.Logger.Warn("switchyard: outbox relay", "err", err)
			}
		}
		next := r.cfg.PollInterval
		if notes != nil {
			if n > 0 && time.Now().Before(hotUntil) {
				hotUntil = time.Now().Add(hotFor)
			}
			if time.Now().Before(hotUntil) {
				next = min(next, hotPoll)
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// drain publishes rows until a claim comes back short, and returns how
// many it claimed.
func (r *relay) drain(ctx context.Context) (int, error) {
	total := 0
	for ctx.Err() == nil {
		items, err := r.o.ClaimOutbox(ctx, r.owner, r.cfg.Batch, r.cfg.Lease)
		if err != nil {
			return total, err
		}
		total += len(items)
		if len(items) > 0 {
			if err := r.publish(ctx, items); err != nil {
				return total, err
			}
		}
		if len(items) < r.cfg.Batch {
			return total, nil
		}
	}
	return total, ctx.Err()
}

// publish publishes items in one broker call and settles their rows:
// published ones are deleted, failed ones released for a later try (with
// backoff), refused ones move their task to dead with the reason. A row
// whose task is gone or has started (its message is out) is deleted
// unpublished.
func (r *relay) publish(ctx context.Context, items []ledger.OutboxItem) error {
	var (
		msgs        []*broker.Message
		sent        []ledger.OutboxItem
		done        []string
		retry       = map[time.Duration][]string{}
		retryErr    = map[time.Duration]string{}
		refusedErrs []error
		closed      error // the broker is closed: the relay stops
	)
	for _, it := range items {
		if it.Task == nil || it.Task.State != ledger.Queued || it.Task.Attempt != 0 {
			// Gone, or published already (a relay died before deleting
			// the row) and started since: a copy now would only come
			// early (a snoozed task's, say).
			done = append(done, it.TaskID)
			continue
		}
		msgs = append(msgs, outboxMessage(it))
		sent = append(sent, it)
	}
	if len(msgs) > 0 {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.Lease/2)
		prs, err := r.b.Publish(pctx, msgs...)
		cancel()
		for k, it := range sent {
			perr := err
			if perr == nil {
				perr = prs[k].Err
			}
			switch {
			case perr == nil:
				done = append(done, it.TaskID)
			case broker.ClassOf(perr) == broker.Permanent && !errors.Is(perr, broker.ErrClosed):
				// The broker will never take this message: dead, with why.
				_, terr := r.l.Transition(context.WithoutCancel(ctx), ledger.TransitionRequest{ID: it.TaskID,
					From: []ledger.State{ledger.Queued}, To: ledger.Dead, Reason: ReasonPublishRefused,
					Detail: perr.Error(), Actor: "outbox-relay:" + r.owner})
				if terr != nil && !errors.Is(terr, ledger.ErrConflict) {
					refusedErrs = append(refusedErrs, terr)
					d := r.backoff(it.Tries)
					retry[d] = append(retry[d], it.TaskID)
					retryErr[d] = perr.Error()
					continue
				}
				done = append(done, it.TaskID)
			default:
				d := r.backoff(it.Tries)
				retry[d] = append(retry[d], it.TaskID)
				retryErr[d] = perr.Error()
				if errors.Is(perr, broker.ErrClosed) {
					closed = perr
				}
			}
		}
	}
	// Settling runs even when ctx has just ended: a row left leased is
	// only published again later, but a settled one is not published
	// twice.
	sctx := context.WithoutCancel(ctx)
	var errs []error
	if err := r.o.DoneOutbox(sctx, r.owner, done); err != nil {
		errs = append(errs, err)
	}
	for d, ids := range retry {
		if err := r.o.ReleaseOutbox(sctx, r.owner, ids, d, retryErr[d]); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, refusedErrs...)
	if closed != nil {
		errs = append(errs, closed)
	}
	if len(retry) > 0 && len(errs) == 0 {
		var n int
		var last string
		for d, ids := range retry {
			n += len(ids)
			last = retryErr[d]
		}
		errs = append(errs, fmt.Errorf("%d of %d tasks not published yet, will retry: %s", n, len(items), last))
	}
	return errors.Join(errs...)
}

// backoff is the delay before the next try of a row that failed tries
// times before this failure.
func (r *relay) backoff(tries int) time.Duration {
	d := 100 * time.Millisecond
	for i := 0; i < tries && d < r.cfg.MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, r.cfg.MaxRetryDelay)
}
