package rabbitmq

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

func init() {
	broker.Register("rabbitmq", open)
	broker.Register("amqps", open)
}

// Driver is the RabbitMQ implementation of broker.Driver. Open it through
// broker.Open or broker.OpenDriver with a rabbitmq:// or amqps:// URL, or
// with Open or OpenConfig.
type Driver struct {
	cfg  *config
	log  *slog.Logger
	conn *connManager
	pub  *publisher

	adminMu  sync.Mutex
	admin    *amqp.Channel
	adminGen uint64
	declared map[string]uint64 // queue name → session generation it was declared on
	// lanes caches, per lane, the work queue's name and the session
	// generation on which declareLane last succeeded (laneDecl), so that a
	// publish to a declared lane builds no names or arguments.
	lanes sync.Map

	// ops counts the administrative operations in progress (withAdmin),
	// including those whose caller gave up: Close waits for them before it
	// closes the connection (see adminOps).
	ops adminOps
	// closeHook, when set (tests), runs when Close starts waiting for n
	// administrative operations.
	closeHook func(n int)
	// adminWait bounds how long Close waits for administrative operations
	// in progress (closeAdminWait unless a test sets it).
	adminWait time.Duration

	consMu    sync.Mutex
	consumers map[string]*consumer // by queue name

	closed atomic.Bool
}

var _ broker.Driver = (*Driver)(nil)

func open(ctx context.Context, u *url.URL) (broker.Driver, error) {
	return Open(ctx, u)
}

// openConfig connects with a parsed configuration. log may be nil
// (slog.Default()).
func openConfig(ctx context.Context, cfg *config, log *slog.Logger) (*Driver, error) {
	if log == nil {
		log = slog.Default()
	}
	cm, err := newConnManager(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	d := &Driver{cfg: cfg, log: log, conn: cm, declared: map[string]uint64{}, consumers: map[string]*consumer{}}
	d.pub = newPublisher(d)
	return d, nil
}

// Capabilities reports what RabbitMQ does natively with this adapter.
func (d *Driver) Capabilities() broker.Capabilities {
	return broker.Capabilities{
		MaxDelay:          MaxDelay,
		LeaseExtension:    true,
		Dedup:             false,
		Ordering:          false,
		DeadLetterReasons: true,
		MaxAttempts:       false,
		MaxMessageSize:    d.cfg.maxMessageSize,
		MaxBatch:          0,
		OldestReadyAge:    false,
	}
}

// withAdmin runs f on the shared administrative channel (declares, passive
// declares, deletes). Operations on it are serialised. A channel-level error
// (404, 406) closes the channel on the broker side; it is reopened next time.
//
// The operation is counted in d.ops from before it starts until f returns,
// even when its caller gave up, so that Close can wait for it: a
// connection closed while a quorum queue's declaration is still being
// completed by the broker leaves a dead-letter worker that crashes if the
// queue is deleted then (see "Limits of the server" in the package
// documentation). Once Close has begun waiting, new operations fail with
// ErrClosed, and queued ones that have not reached the channel yet give
// up without sending anything.
func (d *Driver) withAdmin(ctx context.Context, op string, f func(ch *amqp.Channel) error) error {
	s, err := d.conn.current(op)
	if err != nil {
		return err
	}
	if !d.ops.begin() {
		return broker.ClosedError(op)
	}
	// Detached: a caller that gives up leaves the operation to finish, so
	// that the next one never sends on the channel while an RPC of the
	// last one still waits for its reply.
	_, err = detached(ctx, op, func(context.Context) (struct{}, error) {
		defer d.ops.end()
		d.adminMu.Lock()
		defer d.adminMu.Unlock()
		if d.ops.isClosing() {
			return struct{}{}, broker.ClosedError(op)
		}
		if d.admin == nil || d.adminGen != s.gen || d.admin.IsClosed() {
			ch, err := s.conn.Channel()
			if err != nil {
				return struct{}{}, classify(op, err)
			}
			d.admin, d.adminGen = ch, s.gen
		}
		ch := d.admin
		err := f(ch)
		if err != nil && ch.IsClosed() {
			d.admin = nil
		}
		return struct{}{}, classify(op, err)
	}, nil)
	return err
}

// adminOps counts the administrative operations in progress. A
// sync.WaitGroup does not fit: operations may begin while Close waits.
type adminOps struct {
	mu      sync.Mutex
	n       int
	closing bool
	idle    chan struct{} // closed when n reaches 0 after close began
}

// begin counts one operation in; false once close has begun.
func (a *adminOps) begin() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		return false
	}
	a.n++
	return true
}

// end counts one operation out.
func (a *adminOps) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n--
	if a.n == 0 && a.idle != nil {
		close(a.idle)
		a.idle = nil
	}
}

// isClosing reports whether close has begun.
func (a *adminOps) isClosing() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closing
}

// close refuses new operations and returns a channel closed when none is
// left in progress (at once when none is), and how many were.
func (a *adminOps) close() (<-chan struct{}, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closing = true
	idle := make(chan struct{})
	if a.n == 0 {
		close(idle)
	} else {
		a.idle = idle
	}
	return idle, a.n
}

// declare declares a durable queue once per connection generation.
func (d *Driver) declare(ctx context.Context, op, name string, args amqp.Table) error {
	s, err := d.conn.current(op)
	if err != nil {
		return err
	}
	d.adminMu.Lock()
	gen, ok := d.declared[name]
	d.adminMu.Unlock()
	if ok && gen == s.gen {
		return nil
	}
	err = d.withAdmin(ctx, op, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(name, true, false, false, false, args)
		return err
	})
	if err != nil {
		if isCode(err, amqp.PreconditionFailed) {
			return broker.Errorf(op, broker.Permanent, "queue %s exists with other arguments (was it declared with another delivery_limit?): %w: %w", name, errArgsDiffer, err)
		}
		return err
	}
	d.adminMu.Lock()
	d.declared[name] = s.gen
	d.adminMu.Unlock()
	return nil
}

// declareLane declares the lane's dead-letter queue and its work queue: a
// durable quorum queue whose x-delivery-limit dead-letters a message that
// keeps crashing its consumers. Its dead-lettering is at-least-once (which
// needs x-overflow reject-publish): a dead letter the dead-letter queue
// does not confirm stays in the work queue and is retried.
func (d *Driver) declareLane(ctx context.Context, op, lane string) error {
	if err := d.cfg.checkLane(lane); err != nil {
		return err
	}
	dlq := d.cfg.deadQueue(lane)
	if err := d.declareDead(ctx, op, dlq); err != nil {
		return err
	}
	return d.declareSafe(ctx, op, d.cfg.workQueue(lane), amqp.Table{
		amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
		"x-delivery-limit":          int64(d.cfg.deliveryLimit),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": dlq,
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
	}, amqp.Table{
		amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
		"x-delivery-limit":          int64(d.cfg.deliveryLimit),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": dlq,
		"x-dead-letter-strategy":    "at-most-once",
	})
}

// declareSafe declares queue name with args. When the queue exists with
// legacy, the arguments of the previous version of this adapter (a 406 on
// the first declare), it is used as it is, with a warning: a deployment
// keeps working while it is upgraded, with the previous version's
// guarantees for that queue (see "Upgrading" in the package
// documentation). Any other difference is a permanent error.
func (d *Driver) declareSafe(ctx context.Context, op, name string, args, legacy amqp.Table) error {
	err := d.declare(ctx, op, name, args)
	if !errors.Is(err, errArgsDiffer) || legacy == nil {
		return err
	}
	if lerr := d.declare(ctx, op, name, legacy); lerr != nil {
		if errors.Is(lerr, errArgsDiffer) {
			return broker.Errorf(op, broker.Permanent, "queue %s exists with arguments neither this version nor the previous one declares (was it declared with another delivery_limit, or by hand?); delete it or declare it as %v: %w", name, args, err)
		}
		return lerr
	}
	d.log.Warn("switchyard: queue declared by an earlier version (at-most-once dead-lettering) is used as it is: delayed and dead-lettered messages can be lost while the target queue refuses them; migrate the namespace (see Upgrading in the rabbitmq package documentation)", "queue", name)
	return nil
}

// errArgsDiffer marks a declare refused because the queue exists with other
// arguments.
var errArgsDiffer = errors.New("queue arguments differ")

// deadDeliveryLimit is the dead-letter queues' x-delivery-limit: no limit
// in practice. Operators list dead letters by receiving them and handing
// them back (a requeue, which raises x-delivery-count), and a quorum queue
// without the argument has a delivery limit of 20 from RabbitMQ 4.0 on,
// past which it drops the message: a dashboard re-listing dead letters
// would delete them. The queue has no dead-letter route of its own.
const deadDeliveryLimit = int64(1<<31 - 1)

// declareDead declares a lane's dead-letter queue. A dead-letter queue
// declared by an earlier version of this adapter, without the delivery
// limit, is used as it is, with a warning (its arguments cannot change; on
// RabbitMQ 4 set a delivery-limit policy on it, or recreate it).
func (d *Driver) declareDead(ctx context.Context, op, dlq string) error {
	err := d.declare(ctx, op, dlq, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum, "x-delivery-limit": deadDeliveryLimit})
	if !errors.Is(err, errArgsDiffer) {
		return err
	}
	s, cerr := d.conn.current(op)
	if cerr != nil {
		return cerr
	}
	if perr := d.withAdmin(ctx, op, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(dlq, true, false, false, false, nil)
		return err
	}); perr != nil {
		return err
	}
	d.log.Warn("switchyard: dead-letter queue declared without a delivery limit by an earlier version; on RabbitMQ 4 listing its dead letters more than 20 times drops them: recreate it or set a delivery-limit policy", "queue", dlq)
	d.adminMu.Lock()
	d.declared[dlq] = s.gen
	d.adminMu.Unlock()
	return nil
}

// declareDelay declares the lane's delay queue for bucket: a durable quorum
// queue with no consumer whose expired messages dead-letter back to the work
// queue, at least once (x-dead-letter-strategy at-least-once, which needs
// x-overflow reject-publish): a message the work queue refuses or cannot be
// routed to when it expires stays in the delay queue, and RabbitMQ retries
// it.
func (d *Driver) declareDelay(ctx context.Context, op, lane string, bucket time.Duration) (string, error) {
	if err := d.declareLane(ctx, op, lane); err != nil {
		return "", err
	}
	name := d.cfg.delayQueue(lane, bucket)
	work := d.cfg.workQueue(lane)
	return name, d.declareSafe(ctx, op, name, amqp.Table{
		amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": work,
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
	}, amqp.Table{
		amqp.QueueTypeArg:           amqp.QueueTypeClassic,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": work,
	})
}

// forgetQueue makes the next publish to queue declare it again (the broker
// returned a message for it unroutable: it was deleted).
func (d *Driver) forgetQueue(queue string) {
	d.adminMu.Lock()
	delete(d.declared, queue)
	d.adminMu.Unlock()
	d.lanes.Range(func(lane, v any) bool {
		if v.(laneDecl).work == queue {
			d.lanes.Delete(lane)
		}
		return true
	})
}

// laneDecl is a lane declared on session generation gen (Driver.lanes).
type laneDecl struct {
	work string
	gen  uint64
}

// workQueueDeclared returns the lane's work queue, declaring the lane's
// queues first unless they were declared on the current connection.
func (d *Driver) workQueueDeclared(ctx context.Context, op, lane string) (string, error) {
	s, err := d.conn.current(op)
	if err != nil {
		return "", err
	}
	if v, ok := d.lanes.Load(lane); ok && v.(laneDecl).gen == s.gen {
		return v.(laneDecl).work, nil
	}
	if err := d.declareLane(ctx, op, lane); err != nil {
		return "", err
	}
	work := d.cfg.workQueue(lane)
	d.lanes.Store(lane, laneDecl{work: work, gen: s.gen})
	return work, nil
}

// route returns the queue a message goes to after delay and fills in the
// per-message TTL when it is delayed.
func (d *Driver) route(ctx context.Context, op, lane string, delay time.Duration, pub *amqp.Publishing) (string, error) {
	if delay <= 0 {
		return d.workQueueDeclared(ctx, op, lane)
	}
	q, err := d.declareDelay(ctx, op, lane, bucketFor(delay))
	pub.Expiration = expiration(delay)
	return q, err
}

// Publish enqueues msgs with publisher confirms; a message with a future
// RunAt goes to the delay queue of its bucket.
func (d *Driver) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	const op = "rabbitmq: publish"
	if d.closed.Load() {
		return nil, broker.ClosedError(op)
	}
	res := make([]broker.PublishResult, len(msgs))
	out := make([]outMsg, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	now := time.Now()
	for i, m := range msgs {
		res[i].ID = m.ID
		pub := publishing(m, broker.EncodeEnvelope(m), nil)
		var delay time.Duration
		if !m.RunAt.IsZero() {
			delay = m.RunAt.Sub(now)
		}
		q, err := d.route(ctx, op, m.Lane, delay, &pub)
		if err != nil {
			if broker.ClassOf(err) != broker.Permanent {
				return nil, err
			}
			res[i].Err = err
			continue
		}
		out = append(out, outMsg{queue: q, pub: pub})
		idx = append(idx, i)
	}
	for j, err := range d.pub.send(ctx, op, out) {
		res[idx[j]].Err = err
	}
	return res, nil
}

// Receive leases up to req.Max messages from the lane's queue or its
// dead-letter queue.
func (d *Driver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	const op = "rabbitmq: receive"
	if d.closed.Load() {
		return nil, broker.ClosedError(op)
	}
	if err := d.cfg.checkLane(req.Lane); err != nil {
		return nil, err
	}
	if req.Max < 1 {
		req.Max = 1
	}
	if req.Lease <= 0 {
		req.Lease = 30 * time.Second
	}
	c, err := d.consumer(req.Lane, req.DeadLetters)
	if err != nil {
		return nil, err
	}
	return c.receive(ctx, req)
}

func (d *Driver) consumer(lane string, dead bool) (*consumer, error) {
	q := d.cfg.workQueue(lane)
	if dead {
		q = d.cfg.deadQueue(lane)
	}
	d.consMu.Lock()
	defer d.consMu.Unlock()
	if d.closed.Load() {
		return nil, broker.ClosedError("rabbitmq: receive")
	}
	c := d.consumers[q]
	if c == nil {
		c = newConsumer(d, lane, q, dead)
		d.consumers[q] = c
	}
	return c, nil
}

// Stats reports the lane's depths: ready messages from a passive declare of
// the work queue plus those prefetched by this driver and not yet handed
// out; in-flight from this driver's own leases (RabbitMQ cannot tell other
// consumers' leases apart from its unacked count); delayed from the delay
// queues; dead-lettered from the dead-letter queue.
func (d *Driver) Stats(ctx context.Context, lane string) (broker.Stats, error) {
	const op = "rabbitmq: stats"
	if d.closed.Load() {
		return broker.Stats{}, broker.ClosedError(op)
	}
	if err := d.cfg.checkLane(lane); err != nil {
		return broker.Stats{}, err
	}
	st := broker.Stats{Lane: lane}
	var err error
	if st.Ready, err = d.count(ctx, op, d.cfg.workQueue(lane)); err != nil {
		return broker.Stats{}, err
	}
	if st.DeadLettered, err = d.count(ctx, op, d.cfg.deadQueue(lane)); err != nil {
		return broker.Stats{}, err
	}
	for _, b := range delayBuckets {
		n, err := d.count(ctx, op, d.cfg.delayQueue(lane, b))
		if err != nil {
			return broker.Stats{}, err
		}
		st.Delayed += n
	}
	d.consMu.Lock()
	live, dead := d.consumers[d.cfg.workQueue(lane)], d.consumers[d.cfg.deadQueue(lane)]
	d.consMu.Unlock()
	if live != nil {
		buffered, leased := live.counts()
		st.Ready += buffered
		st.InFlight += leased
	}
	if dead != nil {
		buffered, leased := dead.counts()
		st.DeadLettered += buffered + leased
	}
	return st, nil
}

// count returns the ready messages of a queue, 0 when it does not exist.
func (d *Driver) count(ctx context.Context, op, name string) (int64, error) {
	var n int
	err := d.withAdmin(ctx, op, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		n = q.Messages
		return err
	})
	if isCode(err, amqp.NotFound) {
		return 0, nil
	}
	return int64(n), err
}

// deleteLanes deletes every queue of lanes in the driver's namespace.
// Tests use it to clean up.
func (d *Driver) deleteLanes(ctx context.Context, lanes ...string) error {
	for _, lane := range lanes {
		names := []string{d.cfg.workQueue(lane), d.cfg.deadQueue(lane)}
		for _, b := range delayBuckets {
			names = append(names, d.cfg.delayQueue(lane, b))
		}
		for _, n := range names {
			err := d.withAdmin(ctx, "rabbitmq: delete", func(ch *amqp.Channel) error {
				_, err := ch.QueueDelete(n, false, false, false)
				return err
			})
			if err != nil && !isCode(err, amqp.NotFound) {
				return err
			}
		}
	}
	return nil
}

// closeAdminWait bounds how long Close waits for administrative
// operations in progress.
const closeAdminWait = 5 * time.Second

// Close returns prefetched messages and live leases to the broker (a leased
// message comes back when its lease would have ended), waits up to
// closeAdminWait for administrative operations in progress (declarations
// and deletions, including those whose caller gave up) to be answered, and
// closes the connection. It is safe to call more than once (later calls
// return at once) and from inside an administrative operation: an
// operation that does not end in time, as one that is closing the driver
// itself, only delays Close by closeAdminWait, with a warning.
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.consMu.Lock()
	cs := make([]*consumer, 0, len(d.consumers))
	for _, c := range d.consumers {
		cs = append(cs, c)
	}
	d.consMu.Unlock()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.shutdown(ctx)
		}()
	}
	wg.Wait()
	// After the consumers: returning leases may declare delay queues.
	idle, n := d.ops.close()
	if n > 0 {
		if d.closeHook != nil {
			d.closeHook(n)
		}
		wait := d.adminWait
		if wait <= 0 {
			wait = closeAdminWait
		}
		t := time.NewTimer(wait)
		select {
		case <-idle:
		case <-t.C:
			d.log.Warn("rabbitmq: closing with administrative operations still in progress", "addr", d.cfg.addr, "wait", wait)
		}
		t.Stop()
	}
	d.conn.close()
	return nil
}
