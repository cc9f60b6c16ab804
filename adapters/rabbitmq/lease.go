package rabbitmq

import (
	"context"
	"errors"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

// RabbitMQ keeps an unacked message with its channel until the channel
// closes (or consumer_timeout, 30 minutes by default, closes it), so leases
// are enforced here: each handed-out delivery has a timer that requeues it
// (basic.nack with requeue, which raises x-delivery-count) when its lease
// ends. After that, Ack, Nack, Extend and DeadLetter on the delivery return
// ErrLeaseLost without touching the channel: a second ack or nack of a
// delivery tag would close the channel with PRECONDITION_FAILED.

type leaseState int

const (
	leased leaseState = iota // held by the consumer
	busy                     // an operation on it is in progress
	done                     // acked, nacked or moved: finished for good
	lost                     // requeued by expiry, or its channel closed
)

type lease struct {
	c           *consumer
	ch          *amqp.Channel
	tag         uint64
	attempt     int // the attempt as the driver computed it (before Broker's adjustments)
	raw         amqp.Delivery
	undecodable bool

	mu          sync.Mutex
	state       leaseState
	deadline    time.Time
	timer       *time.Timer
	expiredBusy bool
}

// expire runs on the lease timer.
func (l *lease) expire() {
	l.mu.Lock()
	switch l.state {
	case leased:
		if wait := time.Until(l.deadline); wait > 0 {
			l.timer.Reset(wait) // extended after the timer fired
			l.mu.Unlock()
			return
		}
		l.state = lost
		l.mu.Unlock()
		l.c.settleMu.RLock() // see settle
		l.c.forget(l)
		_ = l.ch.Nack(l.tag, false, true)
		l.c.settleMu.RUnlock()
	case busy:
		l.expiredBusy = true
		l.mu.Unlock()
	default:
		l.mu.Unlock()
	}
}

// begin claims the lease for an operation; it fails with ErrLeaseLost when
// the lease has ended or its channel has closed.
func (l *lease) begin(op string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == leased && l.ch.IsClosed() {
		l.state = lost
		l.timer.Stop()
		go l.c.forget(l)
	}
	if l.state != leased {
		return broker.LeaseLostError(op, l.raw.MessageId)
	}
	l.state = busy
	l.timer.Stop()
	return nil
}

// finish ends an operation: ok means the delivery is settled for good;
// otherwise the lease is held again (and expires now if it ran out
// meanwhile).
func (l *lease) finish(ok bool) {
	l.mu.Lock()
	if ok {
		l.state = done
		l.mu.Unlock()
		l.c.forget(l)
		return
	}
	l.state = leased
	wait := time.Until(l.deadline)
	if l.expiredBusy || wait <= 0 {
		l.expiredBusy = false
		l.mu.Unlock()
		l.expire()
		return
	}
	l.timer.Reset(wait)
	l.mu.Unlock()
}

func (c *consumer) forget(l *lease) {
	c.mu.Lock()
	if _, ok := c.leases[l]; ok {
		delete(c.leases, l)
		if tag := l.raw.ConsumerTag; tag != "" {
			if c.out[tag]--; c.out[tag] <= 0 {
				delete(c.out, tag)
			}
		}
	}
	c.mu.Unlock()
}

// testHookCopied, when set by a test, runs in settle after the copy was
// published and before the delivery is acked.
var testHookCopied func(*lease)

func (l *lease) ack() error { return l.ch.Ack(l.tag, false) }

func leaseOf(op string, d *broker.Delivery) (*lease, error) {
	if d == nil {
		return nil, broker.Invalidf("%s: nil delivery", op)
	}
	l, ok := d.Handle.(*lease)
	if !ok || l == nil {
		return nil, broker.Invalidf("%s: delivery %s was not received from this RabbitMQ driver", op, d.ID)
	}
	return l, nil
}

// settle settles a claimed lease in two steps: republish (when not nil)
// publishes the message's next copy (a delayed retry, a dead letter, a
// replay), and final acks or requeues the delivery on its channel. A
// channel error means the delivery is gone with its channel (RabbitMQ
// requeued it), so the lease is lost.
//
// A copy published and then an ack lost with its channel would leave two
// copies: the new one and the original, which RabbitMQ redelivers. So,
// once the copy is confirmed, the original is recorded as superseded
// (consumer.supersede) before the ack is sent, and if this driver
// receives it again it is acked and dropped instead of handed out
// (handOut). The ack is not made atomic with the publish (an AMQP
// transaction would do it, but every ack on the consumer's channel would
// then need a tx.commit round trip); a redelivery that goes to another
// process is a duplicate, which at-least-once allows and the ledger
// absorbs, but copies do not multiply in a process that survives a
// channel or connection error.
//
// final runs under the consumer's settleMu (read), so that it never
// frees a consumer tag's credit while start decides which tags have none
// left and cancels them (a cancel that reaches a tag RabbitMQ is
// delivering to returns that message with x-delivery-count raised: an
// attempt spent without a delivery).
func settle(op string, l *lease, republish func() error, final func() error) error {
	if err := l.begin(op); err != nil {
		return err
	}
	if republish != nil {
		if err := republish(); err != nil {
			if l.ch.IsClosed() {
				l.finish(true)
				return broker.LeaseLostError(op, l.raw.MessageId)
			}
			l.finish(false)
			return err
		}
		l.c.supersede(l.raw.Headers)
		if testHookCopied != nil {
			testHookCopied(l)
		}
	}
	l.c.settleMu.RLock()
	err := final()
	gone := err != nil && (errors.Is(err, amqp.ErrClosed) || l.ch.IsClosed())
	if err == nil || gone {
		l.finish(true)
	}
	l.c.settleMu.RUnlock()
	switch {
	case err == nil:
		return nil
	case gone:
		return broker.LeaseLostError(op, l.raw.MessageId)
	}
	l.finish(false) // (not under settleMu: it may expire the lease)
	return err
}

// Ack removes the delivered messages. Deliveries whose lease ended are
// skipped with ErrLeaseLost.
func (d *Driver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	const op = "rabbitmq: ack"
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	var first error
	for _, dv := range ds {
		l, err := leaseOf(op, dv)
		if err == nil {
			err = settle(op, l, nil, func() error { return l.ch.Ack(l.tag, false) })
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Nack makes the message deliverable again after delay: republished with
// the attempt carried in a header, to the work queue (no delay) or to the
// delay queue of the delay's bucket, then acked. A native requeue would
// raise x-delivery-count, and the queue's x-delivery-limit would then
// dead-letter a message that asked for more attempts than the limit;
// republishing keeps the count for deliveries nobody settled (crashes,
// expired leases). A dead-letter queue's delivery is requeued natively.
func (d *Driver) Nack(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	return d.nack(ctx, dv, delay, "")
}

// NackWithError is Nack that also sets AMQP header switchyard-last-error
// on the copy it republishes (broker.NackErrorer), so RabbitMQ's
// management UI ("Get messages") and any AMQP tool show why the last
// attempt failed. A dead-letter delivery is returned as by Nack.
func (d *Driver) NackWithError(ctx context.Context, dv *broker.Delivery, delay time.Duration, errText string) error {
	return d.nack(ctx, dv, delay, errText)
}

func (d *Driver) nack(ctx context.Context, dv *broker.Delivery, delay time.Duration, errText string) error {
	const op = "rabbitmq: nack"
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	l, err := leaseOf(op, dv)
	if err != nil {
		return err
	}
	if l.c.dead {
		return settle(op, l, nil, func() error { return l.ch.Nack(l.tag, false, true) })
	}
	return settle(op, l, func() error {
		h := copyHeaders(l.raw.Headers)
		h[hdrPrior] = int64(l.attempt)
		if errText != "" {
			h[hdrLastError] = errText
		}
		pub := republishing(l.raw, h)
		q, err := d.route(ctx, op, l.c.lane, delay, &pub)
		if err != nil {
			return err
		}
		return d.pub.sendOne(ctx, op, outMsg{queue: q, pub: pub})
	}, l.ack)
}

// Extend moves the leases' deadlines to lease from now.
func (d *Driver) Extend(ctx context.Context, ds []*broker.Delivery, leaseFor time.Duration) error {
	const op = "rabbitmq: extend"
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	var first error
	for _, dv := range ds {
		l, err := leaseOf(op, dv)
		if err == nil {
			l.mu.Lock()
			switch {
			case l.state != leased || l.ch.IsClosed():
				err = broker.LeaseLostError(op, l.raw.MessageId)
			default:
				l.deadline = time.Now().Add(leaseFor)
				l.timer.Reset(leaseFor)
				dv.LeaseDeadline = l.deadline
			}
			l.mu.Unlock()
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// DeadLetter publishes the message to the lane's dead-letter queue with the
// dead-letter record in a header, then acks the delivery.
func (d *Driver) DeadLetter(ctx context.Context, dv *broker.Delivery, dl *broker.DeadLetter) error {
	const op = "rabbitmq: dead-letter"
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	l, err := leaseOf(op, dv)
	if err != nil {
		return err
	}
	if dl == nil {
		return broker.Invalidf("%s: nil dead letter", op)
	}
	js, err := broker.EncodeDeadLetter(dl)
	if err != nil {
		return broker.Wrap(op, broker.Permanent, err)
	}
	return settle(op, l, func() error {
		body := l.raw.Body
		if !l.undecodable {
			body = broker.EncodeEnvelope(&dv.Message)
		}
		h := amqp.Table{hdrDeadLetter: string(js), hdrAttempt: int64(dv.Attempt)}
		pub := republishing(l.raw, h)
		pub.Body = body
		if pub.MessageId == "" {
			pub.MessageId = broker.NewID()
		}
		if err := d.declareLane(ctx, op, l.c.lane); err != nil {
			return err
		}
		return d.pub.sendOne(ctx, op, outMsg{queue: d.cfg.deadQueue(l.c.lane), pub: pub})
	}, l.ack)
}

// Replay publishes a dead letter back to its live lane as a fresh message
// (attempts start again at 1) and acks it in the dead-letter queue.
func (d *Driver) Replay(ctx context.Context, dv *broker.Delivery) error {
	const op = "rabbitmq: replay"
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	l, err := leaseOf(op, dv)
	if err != nil {
		return err
	}
	if !l.c.dead {
		return broker.Invalidf("%s: delivery %s is not from a dead-letter queue", op, dv.ID)
	}
	return settle(op, l, func() error {
		body := l.raw.Body
		if !l.undecodable {
			body = broker.EncodeEnvelope(&dv.Message)
		}
		pub := publishing(&dv.Message, body, nil)
		if err := d.declareLane(ctx, op, l.c.lane); err != nil {
			return err
		}
		return d.pub.sendOne(ctx, op, outMsg{queue: d.cfg.workQueue(l.c.lane), pub: pub})
	}, l.ack)
}
