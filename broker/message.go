package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/lanes"
)

// Message is the portable envelope a driver carries. It describes a unit of
// work; large inputs travel by reference (a claim check), never as Body.
//
// Headers whose names start with "switchyard-" are reserved for the framework.
type Message struct {
	// ID identifies the message. Publish assigns a time-ordered unique ID
	// when it is empty. A message keeps its ID across redeliveries, nacks,
	// dead-lettering and replay.
	ID string
	// Lane is the lane (queue) the message is published to. Required.
	Lane string
	// Kind names the handler that processes the message. Required; a stable
	// string, not a Go type name.
	Kind string
	// Body is the encoded task arguments.
	Body []byte
	// Headers carry small string metadata (trace context, for example).
	Headers map[string]string
	// IdempotencyKey, when set, makes a second publish with the same key and
	// Tenant within the deduplication window a no-op that reports the first
	// message's ID.
	IdempotencyKey string
	// OrderingKey, when set, makes messages with the same key in a lane start
	// in publish order and never be leased at the same time.
	OrderingKey string
	// Tenant scopes idempotency keys and fairness. Empty is the default tenant.
	Tenant string
	// RunAt, when in the future, delays the first delivery until then.
	// Zero or within MinYear..MaxYear (see ValidateTime).
	RunAt time.Time
	// EnqueuedAt is set by Publish.
	EnqueuedAt time.Time
	// MaxAttempts bounds deliveries: a message whose next delivery would be
	// attempt MaxAttempts+1 is dead-lettered with ReasonMaxAttempts instead of
	// being delivered. Zero means the broker's default (see Options); at
	// most MaxAttemptsLimit.
	MaxAttempts int
}

// Delivery is a message leased to one consumer.
//
// A delivery from Broker.Receive (or kept by Broker.Accept) carries its
// logical lane in Lane: the lane it was published to, never a shard of a
// fair lane. The shard stays private to Broker, which routes every ack,
// nack, extension, release, dead-letter and replay to it; code that hands
// the delivery to the Driver directly passes Wire(d).
type Delivery struct {
	Message
	// Attempt is 1 on the first delivery and grows on every redelivery,
	// whether caused by a nack, an expired lease or a crashed consumer. On
	// deliveries from a dead-letter queue it is unspecified (drivers report
	// the last attempt or their broker's count); DeadLetter.Attempts holds
	// the history.
	Attempt int
	// LeaseDeadline is when the lease ends unless extended. After it the
	// message may be delivered to another consumer.
	LeaseDeadline time.Time
	// DeadLetter is set on deliveries received from a dead-letter queue.
	DeadLetter *DeadLetter
	// Handle is the driver's opaque reference to this delivery. Only the
	// driver that produced the delivery interprets it.
	Handle any

	// sealed is the body as the driver holds it when Broker opened it with
	// Options.Codec (Body is then the plaintext); Broker gives it back to
	// the driver for every call that may re-publish the message.
	sealed []byte
	// shard is the physical lane the driver delivered from when it differs
	// from Lane (a shard of a fair lane: Lane is then the fair lane).
	// Broker gives it back to the driver for every call (see Wire).
	shard string
}

// Reason is a stable, machine-readable code saying why a message was
// dead-lettered.
type Reason string

// Dead-letter reasons used by the framework and the drivers.
const (
	// ReasonMaxAttempts: the attempt limit was reached (including attempts
	// spent by consumers that crashed).
	ReasonMaxAttempts Reason = "max_attempts"
	// ReasonPermanent: the handler returned a permanent error.
	ReasonPermanent Reason = "permanent_error"
	// ReasonUndecodable: the message could not be decoded.
	ReasonUndecodable Reason = "undecodable"
	// ReasonUnknownKind: no handler is registered for the message's kind.
	ReasonUnknownKind Reason = "unknown_kind"
	// ReasonRejected: a reviewer or operator rejected the task.
	ReasonRejected Reason = "rejected"
	// ReasonBudget: the task crossed a budget (time, calls, tokens, spend).
	ReasonBudget Reason = "budget_exceeded"
	// ReasonExpired: the task's deadline passed before it could run.
	ReasonExpired Reason = "expired"
	// ReasonDeliveryLimit: the broker's own delivery limit moved the message
	// (native redrive), with no error text from the framework.
	ReasonDeliveryLimit Reason = "delivery_limit"
	// ReasonBadSequence: the message's ordering sequence (the framework's
	// header on brokers without native ordering) is missing, malformed or
	// was never assigned for its key, so it cannot take its place in the
	// key's order.
	ReasonBadSequence Reason = "bad_ordering_sequence"
)

// DeadLetter describes why and when a message was dead-lettered, with the
// history of its attempts.
type DeadLetter struct {
	Reason Reason
	// Error is the text of the final error, if any.
	Error string
	// Attempts is the attempt history as known at dead-lettering time, oldest
	// first. With a ledger, the ledger holds the complete history.
	Attempts []AttemptRecord
	// At is when the message was dead-lettered.
	At time.Time
}

// AttemptRecord is one attempt at processing a message.
type AttemptRecord struct {
	Attempt  int
	Start    time.Time
	Duration time.Duration
	// Class is the error class ("transient", "permanent", "unknown_outcome",
	// "panic", …) or empty for success.
	Class  string
	Error  string
	Worker string
}

// PublishResult reports the outcome of one message in a Publish batch.
type PublishResult struct {
	// ID is the message's ID; for a duplicate, the ID of the message already
	// published with the same idempotency key (when the driver knows it).
	ID string
	// Duplicate reports that the idempotency key was already used within the
	// deduplication window and nothing new was enqueued.
	Duplicate bool
	// Err is the per-message error, nil on success.
	Err error
}

// Limits on the portable fields, enforced by Broker before a driver sees a
// message.
const (
	MaxNameLen   = lanes.MaxNameLen // lane and kind names
	MaxKeyLen    = 256              // idempotency key, ordering key, tenant, ID
	MaxHeaders   = 64               // number of headers
	MaxHeaderLen = 4096             // bytes in one header value

	// MaxAttemptsLimit is the largest MaxAttempts a message may ask for.
	// Drivers whose broker counts deliveries itself (RabbitMQ quorum
	// queues, JetStream consumers) set their broker's limit to at least
	// this, so a message's own limit is never cut short by the broker's.
	MaxAttemptsLimit = 1_000_000

	// MinYear and MaxYear bound every time a message carries (RunAt, its
	// deadline header): from 1970-01-01 UTC up to, not including,
	// 2262-01-01 UTC. Brokers and ledgers store times as int64 Unix
	// nanoseconds, which wrap outside 1677–2262; a time outside these
	// bounds is refused with ErrInvalid rather than stored wrapped.
	MinYear = 1970
	MaxYear = 2261
)

var (
	minTime = time.Date(MinYear, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(MaxYear+1, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ValidateTime reports whether t is zero (unset) or within MinYear and
// MaxYear; what names the field in the error (ErrInvalid).
func ValidateTime(what string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if t.Before(minTime) || !t.Before(maxTime) {
		return invalidf("%s %s is outside the supported range %d-01-01 to %d-12-31 UTC", what, t.UTC().Format(time.RFC3339), MinYear, MaxYear)
	}
	return nil
}

// After returns now+d for a delay d, refusing (ErrInvalid) a negative d
// and one that lands beyond MaxYear (durations of about 292 years wrap
// when added to Unix nanoseconds).
func After(what string, now time.Time, d time.Duration) (time.Time, error) {
	if d < 0 {
		return time.Time{}, invalidf("%s %v is negative", what, d)
	}
	if d > maxTime.Sub(now) {
		return time.Time{}, invalidf("%s %v runs past the supported range (until %d-12-31 UTC)", what, d, MaxYear)
	}
	return now.Add(d), nil
}

// ValidateID reports whether id is a valid message ID: 1–256 bytes
// (MaxKeyLen) without control characters. Publish assigns an ID to a
// message without one; drivers check decoded messages with it, so that a
// message published behind the framework's back with a bad ID is
// dead-lettered as undecodable instead of reaching the runtime.
func ValidateID(id string) error {
	if id == "" {
		return invalidf("id is empty")
	}
	return validateKey("id", id)
}

// CheckDecoded checks the fields of a message a driver decoded from its
// broker that the framework relies on: a valid ID (ValidateID) and
// MaxAttempts within 0..MaxAttemptsLimit. Its error matches ErrUndecodable
// (and ErrInvalid); the driver dead-letters such a message with
// ReasonUndecodable.
func CheckDecoded(m *Message) error {
	if err := ValidateID(m.ID); err != nil {
		return fmt.Errorf("%w: %w", ErrUndecodable, err)
	}
	if m.MaxAttempts < 0 || m.MaxAttempts > MaxAttemptsLimit {
		return fmt.Errorf("%w: %w", ErrUndecodable, invalidf("max attempts %d is outside 0..%d", m.MaxAttempts, MaxAttemptsLimit))
	}
	return nil
}

// ValidateName reports whether s is a valid lane or kind name: 1–128
// characters of letters, digits and "_.:-", not starting with punctuation
// (the rule of lanes.ValidateName). The error is permanent and matches
// ErrInvalid.
func ValidateName(what, s string) error {
	if err := lanes.ValidateName(what, s); err != nil {
		return &Error{Class: Permanent, Kind: ErrInvalid, Err: err}
	}
	return nil
}

func validateKey(what, s string) error {
	if len(s) > MaxKeyLen {
		return invalidf("%s is %d bytes, the limit is %d", what, len(s), MaxKeyLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return invalidf("%s contains a control character", what)
		}
	}
	return nil
}

// Validate checks the portable constraints on m (not its size, which depends
// on the driver).
func (m *Message) Validate() error {
	if m == nil {
		return invalidf("nil message")
	}
	if err := ValidateName("lane", m.Lane); err != nil {
		return err
	}
	if err := ValidateName("kind", m.Kind); err != nil {
		return err
	}
	for _, kv := range [...][2]string{{"id", m.ID}, {"idempotency key", m.IdempotencyKey}, {"ordering key", m.OrderingKey}, {"tenant", m.Tenant}} {
		if err := validateKey(kv[0], kv[1]); err != nil {
			return err
		}
	}
	if len(m.Headers) > MaxHeaders {
		return invalidf("%d headers, the limit is %d", len(m.Headers), MaxHeaders)
	}
	for k, v := range m.Headers {
		if k == "" || len(k) > MaxNameLen {
			return invalidf("header name %q is empty or longer than %d bytes", k, MaxNameLen)
		}
		if len(v) > MaxHeaderLen {
			return invalidf("header %q is %d bytes, the limit is %d", k, len(v), MaxHeaderLen)
		}
	}
	if m.MaxAttempts < 0 || m.MaxAttempts > MaxAttemptsLimit {
		return invalidf("max attempts %d is outside 0..%d", m.MaxAttempts, MaxAttemptsLimit)
	}
	if err := ValidateTime("run-at", m.RunAt); err != nil {
		return err
	}
	if err := ValidateTime("enqueued-at", m.EnqueuedAt); err != nil {
		return err
	}
	return nil
}

// Size is the number of bytes the message occupies for size limits: body,
// headers and the portable fields.
func (m *Message) Size() int {
	n := len(m.ID) + len(m.Lane) + len(m.Kind) + len(m.Body) + len(m.IdempotencyKey) + len(m.OrderingKey) + len(m.Tenant)
	for k, v := range m.Headers {
		n += len(k) + len(v)
	}
	return n
}

// Clone returns a deep copy of m.
func (m *Message) Clone() *Message {
	c := *m
	if m.Body != nil {
		c.Body = append([]byte(nil), m.Body...)
	}
	if m.Headers != nil {
		c.Headers = make(map[string]string, len(m.Headers))
		for k, v := range m.Headers {
			c.Headers[k] = v
		}
	}
	return &c
}

func (m *Message) String() string {
	return fmt.Sprintf("message %s (lane %s, kind %s)", m.ID, m.Lane, m.Kind)
}

// Codec transforms message bodies on their way to and from the driver:
// Broker seals every body it publishes and opens every body it receives,
// so that the broker's storage holds only what Seal made. The codec
// package's AEAD (AES-GCM envelope encryption) is the one Switchyard
// provides; ledger.WithCodec applies the same interface to the ledger.
//
// aad is data that Seal binds to the result without carrying it (the
// message's ID, kind and tenant): Open with any other aad fails, so a
// sealed body cannot be moved to another message. Open's errors match
// ErrUndecodable when the input can never be opened (a tampered body, an
// unknown key: permanent), and are transient when opening may succeed
// later (a key service that is down).
type Codec interface {
	Seal(ctx context.Context, plaintext, aad []byte) ([]byte, error)
	Open(ctx context.Context, sealed, aad []byte) ([]byte, error)
}
