package rabbitmq

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

var consumerSeq atomic.Uint64

// consumer receives from one queue (a lane's work queue or its dead-letter
// queue) on a channel of its own. RabbitMQ pushes messages into buf within
// each consumer tag's prefetch; Receive hands them out as leases.
//
// A consumer with credit keeps taking messages from the queue even when no
// one asks for them, which hides them from other consumers, and every
// message it holds when its process dies comes back with x-delivery-count
// raised, as if an attempt had been spent. Cancelling a quorum-queue
// consumer while RabbitMQ is delivering to it does the same to that
// message, which the client never sees: RabbitMQ 3.10's channel returns a
// delivery for a consumer tag it has already dropped (rabbit_fifo_client,
// handle_delivery), and a return raises x-delivery-count. So a tag is
// cancelled only when it has no credit left (nothing can be in flight to
// it then), except by Close:
//
//   - a consumer tag is started with the prefetch the waiting Receive
//     needs (its Max, at most the URL's prefetch), so a caller that holds
//     what it asked for leaves no credit open;
//   - when a Receive needs more than the open credit, tags whose credit is
//     used up (the caller holds all their messages, so nothing is in flight
//     to them) are cancelled, and a tag with the missing credit is added;
//     the open credit of all tags never exceeds the URL's prefetch, while
//     the leases a caller holds are not limited;
//   - tags no Receive has used for idleRelease are given up, and what they
//     buffered is returned to the queue, republished with its attempt
//     count and then acked, so that the return spends no attempt; a tag
//     with credit left drains first: what RabbitMQ pushes to it is
//     republished at once and the original held until the tag's credit
//     is used up, and then the tag is cancelled (see idleRelease);
//   - a Receive with Wait 0 (basic.get) cancels only tags without credit.
type consumer struct {
	d     *Driver
	lane  string
	queue string
	dead  bool

	opMu sync.Mutex // serialises starting, stopping, idle release and shutdown
	// settleMu: settle holds it (read) while it acks or requeues a lease,
	// start (write) while it picks the tags without credit and cancels
	// them.
	settleMu sync.RWMutex

	supMu      sync.Mutex
	superseded map[string]time.Time // copy IDs a published copy replaced, and when
	supOrder   []string             // superseded's keys, oldest first

	mu        sync.Mutex
	ch        *amqp.Channel
	gen       uint64
	chQos     int                      // prefetch set on ch for the next consumer tag
	tags      map[string]int           // running consumer tags and their prefetch
	pumps     map[string]chan struct{} // closed when a tag's pump ends
	buf       []amqp.Delivery          // pushed by RabbitMQ, not handed out
	bufBy     map[string]int           // len(buf) per consumer tag
	out       map[string]int           // handed-out, unsettled deliveries per tag
	draining  map[string]bool          // tags the idle release gave up, still with credit
	held      map[string][]uint64      // per draining tag: delivery tags of superseded originals kept unacked
	signal    chan struct{}            // cap 1: new deliveries or a state change
	receivers int
	idle      *time.Timer
	leases    map[*lease]struct{}
	closed    bool
}

func newConsumer(d *Driver, lane, queue string, dead bool) *consumer {
	return &consumer{d: d, lane: lane, queue: queue, dead: dead, signal: make(chan struct{}, 1),
		tags: map[string]int{}, pumps: map[string]chan struct{}{}, bufBy: map[string]int{}, out: map[string]int{},
		draining: map[string]bool{}, held: map[string][]uint64{}, leases: map[*lease]struct{}{}}
}

func (c *consumer) ping() {
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// counts returns the messages pushed but not handed out and the live
// leases.
func (c *consumer) counts() (buffered, leased int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.buf)), int64(len(c.leases))
}

// credit is (c.mu held) how many more messages RabbitMQ may push to the
// running tags for a Receive, and which tags have none left. A draining
// tag's credit is not counted (what it gets is returned to the queue).
func (c *consumer) credit() (open int, used []string) {
	for tag := range c.tags {
		if n := c.tagCredit(tag); n > 0 {
			if !c.draining[tag] {
				open += n
			}
		} else {
			used = append(used, tag)
		}
	}
	return open, used
}

// tagCredit is (c.mu held) how many more messages RabbitMQ may push to
// tag: its prefetch less the deliveries it holds unacked.
func (c *consumer) tagCredit(tag string) int {
	return c.tags[tag] - c.out[tag] - c.bufBy[tag] - len(c.held[tag])
}

// running reports (c.mu held) whether tags are consuming on a live channel.
func (c *consumer) running() bool {
	return len(c.tags) > 0 && c.ch != nil && !c.ch.IsClosed()
}

// channel returns the consumer's channel on the current connection,
// opening it when needed. Called with opMu held, in a detached operation.
func (c *consumer) channel(op string, s *session) (*amqp.Channel, error) {
	c.mu.Lock()
	ch, gen := c.ch, c.gen
	c.mu.Unlock()
	if ch != nil && gen == s.gen && !ch.IsClosed() {
		return ch, nil
	}
	nch, err := s.conn.Channel()
	if err != nil {
		return nil, classify(op, err)
	}
	c.mu.Lock()
	// Deliveries of the old channel died with it: RabbitMQ requeued them.
	c.ch, c.gen, c.chQos, c.buf = nch, s.gen, 0, nil
	clear(c.tags)
	clear(c.bufBy)
	clear(c.draining)
	clear(c.held)
	c.mu.Unlock()
	return nch, nil
}

// ensure makes the running tags' open credit cover max messages where the
// prefetch allows, waiting for the connection up to until.
//
// The channel work runs detached, under opMu, and to its end even when ctx
// ends first: the channel carries the leases of everything the consumer
// handed out, so a Receive that gives up must not close it, and the next
// operation must not start an RPC on it while one is still waiting for its
// reply. A consumer tag that starts after its Receive has left is kept
// (the idle release cancels it if no Receive comes).
func (c *consumer) ensure(ctx context.Context, op string, until time.Time, max int) error {
	c.mu.Lock()
	open, _ := c.credit()
	if c.running() && (open >= max || len(c.buf) > 0) {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	s, err := c.d.conn.await(ctx, op, until)
	if err != nil {
		return err
	}
	_, err = detached(ctx, op, func(ctx context.Context) (struct{}, error) {
		c.opMu.Lock()
		defer c.opMu.Unlock()
		err := c.start(ctx, op, s, max)
		if isCode(err, amqp.NotFound) {
			// The queue was deleted behind the driver's back (the 404
			// closed the channel): declare it again and retry once.
			c.d.forgetQueue(c.queue)
			err = c.start(ctx, op, s, max)
		}
		c.mu.Lock()
		c.armIdle()
		c.mu.Unlock()
		return struct{}{}, err
	}, nil)
	return err
}

// start is ensure's channel work (opMu held, detached).
func (c *consumer) start(ctx context.Context, op string, s *session, max int) error {
	if err := c.declare(ctx, op); err != nil {
		return err
	}
	ch, err := c.channel(op, s)
	if err != nil {
		return err
	}
	c.undrain(ch)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return broker.ClosedError(op)
	}
	open, used := c.credit()
	if len(c.buf) > 0 || open >= max {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	// Tags without credit have nothing in flight: cancelling them is safe,
	// and their deliveries stay valid on the channel. No lease is acked
	// meanwhile (settleMu): RabbitMQ would answer the ack with a new
	// message for the tag, and the cancel would return that message with
	// an attempt spent.
	if len(used) > 0 {
		c.settleMu.Lock()
		c.mu.Lock()
		_, used = c.credit()
		c.mu.Unlock()
		if len(used) > 0 {
			c.stop(ctx, used)
		}
		c.settleMu.Unlock()
	}
	c.mu.Lock()
	total := 0
	for _, q := range c.tags {
		total += q
	}
	open, _ = c.credit()
	want := min(max-open, c.d.cfg.prefetch-total)
	c.mu.Unlock()
	if want <= 0 {
		return nil
	}
	if c.chQos != want {
		if err := ch.Qos(want, 0, false); err != nil {
			return classify(op, err)
		}
		c.chQos = want
	}
	tag := "switchyard-" + strconv.FormatUint(consumerSeq.Add(1), 10)
	deliveries, err := ch.Consume(c.queue, tag, false, false, false, false, nil)
	if err != nil {
		return classify(op, err)
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.tags[tag], c.pumps[tag] = want, done
	c.mu.Unlock()
	go c.pump(ch, tag, deliveries, done)
	return nil
}

func (c *consumer) declare(ctx context.Context, op string) error {
	return c.d.declareLane(ctx, op, c.lane)
}

// pump moves one tag's deliveries from amqp091-go into buf. A draining
// tag's deliveries are returned to the queue at once (see drainOne).
func (c *consumer) pump(ch *amqp.Channel, tag string, deliveries <-chan amqp.Delivery, done chan struct{}) {
	for dv := range deliveries {
		c.mu.Lock()
		draining := c.ch == ch && c.draining[tag]
		c.mu.Unlock()
		if draining && c.drainOne(ch, tag, dv) {
			continue
		}
		c.mu.Lock()
		if c.ch == ch {
			c.buf = append(c.buf, dv)
			c.bufBy[tag]++
			if draining {
				c.armIdle() // its copy failed: the idle release tries again
			}
		}
		c.mu.Unlock()
		c.ping()
	}
	c.mu.Lock()
	var held []uint64
	if c.ch == ch {
		delete(c.tags, tag)
		held = c.held[tag]
		delete(c.held, tag)
		delete(c.draining, tag)
		if ch.IsClosed() {
			c.buf = nil
			clear(c.bufBy)
		}
	}
	delete(c.pumps, tag)
	c.mu.Unlock()
	for _, dt := range held {
		_ = ch.Ack(dt, false) // superseded by their copies; the tag is gone
	}
	close(done)
	c.ping()
}

// drainOne returns a delivery pushed to a draining tag to the queue: its
// copy is published with its attempt count and the original is held
// unacked, so that the tag's credit shrinks; when none is left the tag is
// cancelled (retire) and the originals acked. It reports false when the
// copy could not be published (the delivery is then buffered as usual).
func (c *consumer) drainOne(ch *amqp.Channel, tag string, dv amqp.Delivery) bool {
	h := copyHeaders(dv.Headers)
	h[hdrPrior] = int64(attemptOf(dv.Headers) - 1)
	pub := republishing(dv, h)
	if err := c.d.pub.sendOne(context.Background(), "rabbitmq: release", outMsg{queue: c.queue, pub: pub}); err != nil {
		return false
	}
	c.supersede(dv.Headers)
	c.mu.Lock()
	if c.ch != ch {
		c.mu.Unlock()
		return true // gone with its channel (and superseded)
	}
	if !c.draining[tag] {
		// A Receive took the tag back meanwhile: the original is replaced.
		c.mu.Unlock()
		_ = ch.Ack(dv.DeliveryTag, false)
		return true
	}
	c.held[tag] = append(c.held[tag], dv.DeliveryTag)
	full := c.tagCredit(tag) <= 0
	c.mu.Unlock()
	if full {
		go c.retire(ch)
	}
	return true
}

// retire cancels the draining tags that have no credit left: nothing can
// be in flight to them. Their pumps ack what they held.
func (c *consumer) retire(ch *amqp.Channel) {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.retireFull(ch)
}

// retireFull is retire with opMu held. No lease is acked meanwhile
// (settleMu, as in start).
func (c *consumer) retireFull(ch *amqp.Channel) {
	c.settleMu.Lock()
	defer c.settleMu.Unlock()
	c.mu.Lock()
	var full []string
	if c.ch == ch {
		for tag := range c.draining {
			if _, ok := c.tags[tag]; ok && c.tagCredit(tag) <= 0 {
				full = append(full, tag)
			}
		}
	}
	c.mu.Unlock()
	if len(full) > 0 {
		c.stop(context.Background(), full)
	}
}

// undrain (opMu held) takes the draining tags back for a Receive: their
// held originals, superseded by their copies, are acked, which gives the
// tags their credit again.
func (c *consumer) undrain(ch *amqp.Channel) {
	c.mu.Lock()
	if c.ch != ch || len(c.draining) == 0 {
		c.mu.Unlock()
		return
	}
	var held []uint64
	for tag := range c.draining {
		held = append(held, c.held[tag]...)
		delete(c.held, tag)
	}
	clear(c.draining)
	c.mu.Unlock()
	for _, dt := range held {
		_ = ch.Ack(dt, false)
	}
}

// receive hands out up to req.Max deliveries, waiting up to req.Wait.
func (c *consumer) receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	const op = "rabbitmq: receive"
	if err := ctx.Err(); err != nil {
		// Nothing to do for a caller that gave up; and an RPC started
		// with an ended context closes its channel under the RPC.
		return nil, classify(op, err)
	}
	until := time.Now().Add(req.Wait)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, broker.ClosedError(op)
	}
	c.receivers++
	if c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()
	defer c.leave()

	var got []amqp.Delivery
	var ch *amqp.Channel
	if req.Wait <= 0 {
		var err error
		if got, ch, err = c.poll(ctx, op, req.Max); err != nil {
			return nil, err
		}
	}
	var timer *time.Timer
	for len(got) == 0 {
		c.mu.Lock()
		if n := min(req.Max, len(c.buf)); n > 0 {
			got = make([]amqp.Delivery, n)
			copy(got, c.buf)
			rest := copy(c.buf, c.buf[n:])
			clear(c.buf[rest:])
			c.buf = c.buf[:rest]
			for _, dv := range got {
				if c.bufBy[dv.ConsumerTag]--; c.bufBy[dv.ConsumerTag] <= 0 {
					delete(c.bufBy, dv.ConsumerTag)
				}
			}
			ch = c.ch
			more := len(c.buf) > 0
			c.mu.Unlock()
			if more {
				c.ping() // another waiting Receive can take the rest
			}
			break
		}
		c.mu.Unlock()
		if req.Wait <= 0 {
			return nil, nil
		}
		if err := c.ensure(ctx, op, until, req.Max); err != nil {
			return nil, err
		}
		wait := time.Until(until)
		if wait <= 0 {
			return nil, nil
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-c.signal:
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			return nil, classify(op, ctx.Err())
		}
	}
	if err := ctx.Err(); err != nil {
		// Cancelled: a caller that gave up may drop the deliveries, which
		// would stay unacked on the channel until it closes. Put them back
		// in the buffer, unspent, for the next Receive (or the idle
		// release).
		c.unTake(ch, got)
		return nil, classify(op, err)
	}
	return c.handOut(ctx, ch, got, req.Lease), nil
}

// unTake puts deliveries taken from the buffer (or by basic.get) back at
// its front. Deliveries of a channel that has closed since are dropped:
// RabbitMQ requeued them with the channel.
func (c *consumer) unTake(ch *amqp.Channel, got []amqp.Delivery) {
	if len(got) == 0 {
		return
	}
	c.mu.Lock()
	if c.ch == ch && ch != nil && !ch.IsClosed() {
		c.buf = append(append(make([]amqp.Delivery, 0, len(got)+len(c.buf)), got...), c.buf...)
		for _, dv := range got {
			c.bufBy[dv.ConsumerTag]++
		}
	}
	c.mu.Unlock()
	c.ping()
}

// poll takes what is ready now without waiting, so that a Wait of 0 needs
// no consumer: basic.get, after the buffer. Running tags without credit
// are stopped first; tags with credit are left running (cancelling one
// could spend an attempt of a message in flight to it, see consumer), and
// what they get meanwhile is buffered for the next Receive or the idle
// release.
// It runs detached, under opMu (see ensure); what it got after its caller
// left goes back to the buffer.
func (c *consumer) poll(ctx context.Context, op string, max int) ([]amqp.Delivery, *amqp.Channel, error) {
	s, err := c.d.conn.current(op)
	if err != nil {
		return nil, nil, err
	}
	r, err := detached(ctx, op, func(ctx context.Context) (polled, error) {
		r, err := c.pollOnce(ctx, op, s, max)
		if isCode(err, amqp.NotFound) {
			// The queue was deleted behind the driver's back (the 404
			// closed the channel): declare it again and retry once.
			c.d.forgetQueue(c.queue)
			r, err = c.pollOnce(ctx, op, s, max)
		}
		return r, err
	}, func(r polled, _ error) { c.unTake(r.ch, r.got) })
	return r.got, r.ch, err
}

// polled is what pollOnce took, and on which channel.
type polled struct {
	got []amqp.Delivery
	ch  *amqp.Channel
}

// pollOnce is one try of poll's channel work (detached).
func (c *consumer) pollOnce(ctx context.Context, op string, s *session, max int) (polled, error) {
	if err := c.declare(ctx, op); err != nil {
		return polled{}, err
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.settleMu.Lock() // no credit freed while the tags are sorted (see start)
	c.mu.Lock()
	var full []string
	for tag := range c.tags {
		if c.tagCredit(tag) <= 0 {
			full = append(full, tag)
		}
	}
	c.mu.Unlock()
	if len(full) > 0 {
		c.stop(ctx, full)
	}
	c.settleMu.Unlock()
	ch, err := c.channel(op, s)
	if err != nil {
		return polled{}, err
	}
	c.mu.Lock()
	if len(c.buf) > 0 {
		c.mu.Unlock()
		return polled{}, nil // the loop in receive takes them
	}
	c.mu.Unlock()
	var got []amqp.Delivery
	for len(got) < max {
		dv, ok, err := ch.Get(c.queue, false)
		if err != nil {
			if len(got) > 0 {
				break
			}
			return polled{}, classify(op, err)
		}
		if !ok {
			break
		}
		got = append(got, dv)
	}
	return polled{got, ch}, nil
}

// leave ends one Receive; the last one out arms the idle release.
//
// Tags are not cancelled at once: a caller that receives in a loop would
// pay a cancel and a consume every time, and cancelling a tag with open
// credit can spend an attempt of a message in flight to it.
func (c *consumer) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.receivers--
	c.armIdle()
}

// armIdle (c.mu held) arms the idle release when no Receive is in progress
// and tags or buffered messages are left.
func (c *consumer) armIdle() {
	if c.receivers > 0 || c.closed || (len(c.tags) == 0 && len(c.buf) == 0) {
		return
	}
	if c.idle == nil {
		c.idle = time.AfterFunc(c.d.cfg.idleRelease, c.idleRelease)
	} else {
		c.idle.Reset(c.d.cfg.idleRelease)
	}
}

// idleRelease gives up the tags of a consumer no one has received from
// for idleRelease and returns what they buffered.
//
// A tag with no credit left is cancelled at once. A tag with credit is
// not: a quorum queue returns a message it is pushing to a tag when the
// tag is cancelled, with x-delivery-count raised, and the client never
// sees it (RabbitMQ 3.10's rabbit_fifo_client returns a delivery for a
// consumer tag it has dropped), so a message published at that instant
// would come back with an attempt spent though nobody received it. Such
// a tag drains instead: what RabbitMQ pushes to it is returned at once
// (its copy published with its attempt count, see drainOne) and the
// original held unacked, which uses up the tag's credit; when none is
// left, nothing can be in flight to it and it is cancelled (retire). A
// Receive that needs credit meanwhile takes the draining tags back
// (undrain). Dead-letter queues do not count attempts by
// x-delivery-count: their tags are cancelled at once.
func (c *consumer) idleRelease() {
	// Not cancelled midway: its RPCs end when the broker answers, or the
	// connection dies (see ensure).
	ctx := context.Background()
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.settleMu.Lock() // no credit freed while the tags are sorted (see start)
	c.mu.Lock()
	if c.receivers > 0 || c.closed {
		c.mu.Unlock()
		c.settleMu.Unlock()
		return
	}
	ch := c.ch
	var full []string
	for tag := range c.tags {
		if c.dead || c.tagCredit(tag) <= 0 {
			full = append(full, tag)
		} else {
			c.draining[tag] = true
		}
	}
	c.mu.Unlock()
	if len(full) > 0 {
		c.stop(ctx, full)
	}
	c.settleMu.Unlock()
	c.mu.Lock()
	if c.receivers > 0 {
		// A Receive arrived meanwhile and takes the buffer.
		c.mu.Unlock()
		return
	}
	rel := c.buf
	c.buf = nil
	clear(c.bufBy)
	c.mu.Unlock()
	c.release(ctx, ch, rel)
	c.retireFull(ch)
}

// stop cancels the given tags, or all of them when tags is nil (opMu held),
// and waits for their pumps, so that buf holds every message RabbitMQ
// pushed to them. It returns the channel.
func (c *consumer) stop(ctx context.Context, tags []string) *amqp.Channel {
	c.mu.Lock()
	ch := c.ch
	if tags == nil {
		for t := range c.tags {
			tags = append(tags, t)
		}
	}
	var dones []chan struct{}
	for _, t := range tags {
		if d, ok := c.pumps[t]; ok {
			dones = append(dones, d)
		}
		delete(c.tags, t)
	}
	c.mu.Unlock()
	if ch == nil || ch.IsClosed() {
		return ch
	}
	for _, t := range tags {
		if err := rpc(ctx, "rabbitmq: cancel consumer", func() error { return ch.Cancel(t, false) }); err != nil {
			return ch
		}
	}
	for _, d := range dones {
		select {
		case <-d:
		case <-ctx.Done():
			return ch
		}
	}
	return ch
}

// release returns pushed deliveries that were never handed out. Each is
// republished with its attempt count and then acked, so that the return
// does not count as a delivery; if republishing fails it is requeued.
func (c *consumer) release(ctx context.Context, ch *amqp.Channel, ds []amqp.Delivery) {
	if len(ds) == 0 || ch == nil || ch.IsClosed() {
		return
	}
	out := make([]outMsg, len(ds))
	for i, dv := range ds {
		h := copyHeaders(dv.Headers)
		if !c.dead {
			h[hdrPrior] = int64(attemptOf(dv.Headers) - 1)
		}
		out[i] = outMsg{queue: c.queue, pub: republishing(dv, h)}
	}
	for i, err := range c.d.pub.send(ctx, "rabbitmq: release", out) {
		if err == nil {
			c.supersede(ds[i].Headers)
			// A draining tag's original is held (see idleRelease).
			tag := ds[i].ConsumerTag
			c.mu.Lock()
			hold := c.ch == ch && c.draining[tag]
			if hold {
				c.held[tag] = append(c.held[tag], ds[i].DeliveryTag)
			}
			c.mu.Unlock()
			if !hold {
				_ = ch.Ack(ds[i].DeliveryTag, false)
			}
		} else {
			_ = ch.Nack(ds[i].DeliveryTag, false, true)
		}
	}
}

// shutdown stops the consumer and returns its messages: buffered ones at
// once, leased ones when their lease would have ended. It cancels tags
// with credit too (it does not wait for them to drain): a message
// RabbitMQ pushes to one at that instant comes back with an attempt
// spent, as when the process dies.
func (c *consumer) shutdown(ctx context.Context) {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.mu.Lock()
	c.closed = true
	if c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()
	ch := c.stop(ctx, nil)
	c.mu.Lock()
	rel := c.buf
	c.buf = nil
	clear(c.bufBy)
	ls := make([]*lease, 0, len(c.leases))
	for l := range c.leases {
		ls = append(ls, l)
	}
	c.mu.Unlock()
	c.release(ctx, ch, rel)
	for _, l := range ls {
		if l.begin("rabbitmq: close") != nil {
			continue
		}
		remaining := time.Until(l.deadline)
		if c.dead || remaining <= 0 {
			l.finish(l.ch.Nack(l.tag, false, true) == nil)
			continue
		}
		// Keep the lease's promise: the message reappears when the lease
		// would have ended, with the next attempt number.
		h := copyHeaders(l.raw.Headers)
		h[hdrPrior] = int64(l.attempt)
		pub := republishing(l.raw, h)
		q, err := c.d.route(ctx, "rabbitmq: close", c.lane, remaining, &pub)
		if err == nil {
			err = c.d.pub.sendOne(ctx, "rabbitmq: close", outMsg{queue: q, pub: pub})
		}
		if err == nil {
			l.finish(l.ch.Ack(l.tag, false) == nil)
		} else {
			l.finish(l.ch.Nack(l.tag, false, true) == nil)
		}
	}
}

// Superseded copies. A delivery settled by publishing its next copy (a
// delayed retry, a dead letter, an idle release) and acking it is recorded
// here, by its copy ID (hdrCopy), before the ack is sent; if the ack is
// lost with its channel, RabbitMQ redelivers that copy, and handOut acks
// and drops it instead of handing out a second copy of the message (see
// settle). A copy ID names one published copy, never the one that
// replaces it nor any later publish of the message. Records are kept for
// supersededFor and at most supersededMax of them; dead-letter queues keep
// none.
const (
	supersededFor = 5 * time.Minute
	supersededMax = 1 << 16
)

// supersede records the delivery with headers h as replaced by a
// published copy. Messages without a copy ID (published by an earlier
// version) are not recorded.
func (c *consumer) supersede(h amqp.Table) {
	id, _ := h[hdrCopy].(string)
	if c.dead || id == "" {
		return
	}
	now := time.Now()
	c.supMu.Lock()
	defer c.supMu.Unlock()
	if c.superseded == nil {
		c.superseded = map[string]time.Time{}
	}
	// Drop expired records, oldest first, and the oldest when full.
	for len(c.supOrder) > 0 {
		old := c.supOrder[0]
		at, ok := c.superseded[old]
		full := len(c.supOrder) >= supersededMax
		if ok && !full && now.Sub(at) < supersededFor {
			break
		}
		if ok {
			delete(c.superseded, old)
		}
		c.supOrder[0] = ""
		c.supOrder = c.supOrder[1:]
	}
	if _, ok := c.superseded[id]; !ok {
		c.supOrder = append(c.supOrder, id)
	}
	c.superseded[id] = now
}

// wasSuperseded reports whether dv is a redelivery of a copy that a
// published copy replaced (its ack was lost); the record is used up.
func (c *consumer) wasSuperseded(dv *amqp.Delivery) bool {
	id, _ := dv.Headers[hdrCopy].(string)
	if c.dead || !dv.Redelivered || id == "" {
		return false
	}
	c.supMu.Lock()
	defer c.supMu.Unlock()
	at, ok := c.superseded[id]
	if !ok || time.Since(at) >= supersededFor {
		return false
	}
	delete(c.superseded, id)
	return true
}
