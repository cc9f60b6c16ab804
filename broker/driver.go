package broker

import (
	"context"
	"time"
)

// Driver is the contract a broker adapter implements. It is public so that
// third-party adapters can be written against it; it is versioned with the
// module and changes only with a major version.
//
// A driver translates the contract to its broker and classifies the broker's
// errors (see Error and Class). It does not retry, sleep, decide policy or
// validate portable fields: Broker does that once for every driver.
//
// Every method that can block takes a context and returns promptly when it is
// cancelled. All methods are safe for concurrent use. After Close every
// method returns an error matching ErrClosed.
//
// The conformance package holds the suite every driver must pass.
type Driver interface {
	// Publish enqueues a batch of validated messages (at most
	// Capabilities.MaxBatch; Broker splits larger ones) and returns one
	// result per message, in order. A nil error means every result's Err
	// says how that message fared; a non-nil error means the batch as a
	// whole failed and none of the results can be trusted.
	//
	// A message whose RunAt lies beyond Capabilities.MaxDelay is never
	// passed in: Broker holds it instead.
	Publish(ctx context.Context, msgs []*Message) ([]PublishResult, error)

	// Receive leases up to req.Max ready messages of req.Lane (or of its
	// dead-letter queue, with req.DeadLetters). It waits up to req.Wait for
	// the first message and returns an empty slice, not an error, when none
	// arrives. Each delivery's Attempt is one more than the number of earlier
	// deliveries; dead-letter deliveries do not count attempts.
	Receive(ctx context.Context, req ReceiveRequest) ([]*Delivery, error)

	// Ack removes delivered messages for good. Acking a delivery whose lease
	// passed to another consumer returns ErrLeaseLost (where the broker can
	// tell) and never removes the other consumer's delivery.
	Ack(ctx context.Context, ds []*Delivery) error

	// Nack ends the lease and makes the message deliverable again no earlier
	// than delay from now. The next delivery's Attempt is one higher.
	Nack(ctx context.Context, d *Delivery, delay time.Duration) error

	// Extend sets the leases of the deliveries to end lease from now
	// (heartbeat). It returns ErrLeaseLost for a delivery that another
	// consumer holds.
	Extend(ctx context.Context, ds []*Delivery, lease time.Duration) error

	// DeadLetter moves the delivered message to its lane's dead-letter queue
	// with dl, and out of the live queue.
	DeadLetter(ctx context.Context, d *Delivery, dl *DeadLetter) error

	// Replay moves a delivery received from a dead-letter queue back to its
	// live lane as a fresh message (attempts start again at 1), keeping its
	// ID and fields. It is not subject to deduplication.
	Replay(ctx context.Context, d *Delivery) error

	// Stats reports the lane's queue depths.
	Stats(ctx context.Context, lane string) (Stats, error)

	// Capabilities says what the broker does natively. It never changes
	// after the driver is opened.
	Capabilities() Capabilities

	// Close releases the driver's resources. Unacked deliveries are
	// redelivered after their leases. Close is safe to call twice.
	Close() error
}

// ReceiveRequest parameterises Driver.Receive.
type ReceiveRequest struct {
	Lane string
	// Max is the most messages to return; at least 1.
	Max int
	// Lease is how long the deliveries stay invisible to other consumers.
	Lease time.Duration
	// Wait is how long to wait for a first message; 0 returns at once.
	Wait time.Duration
	// DeadLetters receives from the lane's dead-letter queue instead.
	DeadLetters bool
}

// Stats are a lane's queue depths at one moment (approximate where the broker
// is).
type Stats struct {
	Lane string
	// Ready messages can be delivered now.
	Ready int64
	// InFlight messages are leased to a consumer.
	InFlight int64
	// Delayed messages become ready later (run-at, nack delay).
	Delayed int64
	// DeadLettered messages sit in the lane's dead-letter queue.
	DeadLettered int64
	// OldestReady is how long the oldest ready message has been ready; zero
	// when none is ready or the broker cannot tell (see
	// Capabilities.OldestReadyAge).
	OldestReady time.Duration
}

// Capabilities says what a broker does natively. Where it lacks something,
// Broker supplies a fallback that gives the same guarantee, and the
// conformance suite checks the guarantee either way.
type Capabilities struct {
	// MaxDelay is the longest native delay (run-at or nack delay); 0 means
	// unlimited. Broker holds longer delays itself.
	MaxDelay time.Duration
	// MaxLease is the longest single lease or extension; 0 means unlimited.
	MaxLease time.Duration
	// LeaseExtension: Extend prolongs a lease natively.
	LeaseExtension bool
	// Dedup: the broker deduplicates by (tenant, idempotency key) natively
	// within DedupWindow (0 = forever). Without it, Broker uses
	// Options.Dedup.
	Dedup       bool
	DedupWindow time.Duration
	// Ordering: the broker serialises messages with the same ordering key
	// natively. Without it, Broker uses Options.Sequencer.
	Ordering bool
	// DeadLetterReasons: dead letters keep reason, error and history.
	DeadLetterReasons bool
	// MaxAttempts: the broker enforces Message.MaxAttempts itself, including
	// for consumers that crash. Without it, Broker checks on receive.
	MaxAttempts bool
	// MaxMessageSize is the largest Message.Size the broker accepts; 0 means
	// unlimited.
	MaxMessageSize int
	// MaxBatch is the largest batch for Publish, Receive, Ack and Extend; 0
	// means unlimited.
	MaxBatch int
	// OldestReadyAge: Stats.OldestReady is reported.
	OldestReadyAge bool
}

// LaneLister is implemented by drivers that can list the lanes holding
// messages in their namespace (live or dead). Operator tools use it; without
// it they fall back to the configured lanes.
type LaneLister interface {
	Lanes(ctx context.Context) ([]string, error)
}

// Lanes lists the driver's lanes when it can tell (see LaneLister); ok is
// false when it cannot.
func (b *Broker) Lanes(ctx context.Context) (lanes []string, ok bool, err error) {
	l, can := b.d.(LaneLister)
	if !can {
		return nil, false, nil
	}
	lanes, err = l.Lanes(ctx)
	return b.foldFairLanes(lanes), true, Wrap("lanes", Transient, err)
}
