// Package broker is Switchyard's driver contract and the portable layer
// above it.
//
// # Two levels
//
// A Driver is what a broker adapter implements: a small, batch-shaped,
// context-first interface (publish, receive with a lease, ack, nack with a
// delay, extend, dead-letter, replay, stats, close). It is public so that
// third-party adapters can be written against it, and it changes only with
// a major version. The conformance package holds the suite every driver
// passes.
//
// A Broker wraps a Driver and is what the scheduler and users call. It adds,
// once for every driver: validation of portable fields, IDs and enqueue
// times, size limits (ErrTooLarge), batching to the driver's batch size,
// and the fallbacks for what a broker lacks natively — declared in its
// Capabilities:
//
//   - deduplication by idempotency key (Options.Dedup; the ledger covers
//     every process and any horizon);
//   - ordering by key (Options.Sequencer, shared by every process: the
//     ledger's; a per-key sequence assigned at publish; a message whose
//     turn has not come is offered again later without spending an
//     attempt; without a shared sequencer a keyed publish is refused with
//     ErrNoSequencer — see docs/ORDERING.md);
//   - delays beyond the broker's maximum (the message hops with the longest
//     native delay until it is due; headers carry the real run-at, the
//     attempts already spent and the idempotency key);
//   - the attempt limit (a delivery past Message.MaxAttempts is
//     dead-lettered with ReasonMaxAttempts instead of being returned);
//   - returning a delivery without spending an attempt (Release).
//
// The conformance suite checks each guarantee, not the mechanism, so the
// same case passes whether the broker or the fallback provides it.
//
// # Errors
//
// Every error is classified Transient, Permanent or UnknownOutcome (match
// with errors.Is against ErrTransient, ErrPermanent, ErrUnknownOutcome, or
// use ClassOf), and may carry a specific kind: ErrTooLarge, ErrUnsupported,
// ErrInvalid, ErrClosed, ErrLeaseLost. Drivers map their native codes with a
// table; anything unrecognised is transient. Context errors stay
// recognisable.
//
// # Opening by URL
//
// Adapters register URL schemes in init; Open parses the URL, rejects
// unknown query parameters (Query helps drivers do that) and never puts
// credentials in error text (Redact).
//
//	embedded:///var/lib/app/queue.db    adapters/embedded (SQLite file)
//	mem://name                          adapters/embedded (in-process)
//	rabbitmq://user:pass@host/vhost     adapters/rabbitmq
//	nats://host:4222                    adapters/nats
//	redis://:pass@host:6379/0           adapters/asynq
//	sqs://?region=eu-west-1             adapters/sqs
//
// Every adapter in this module also opens without a URL, in one shape: an
// exported Config, ParseURL(*url.URL) (*Config, error) to read one from a
// URL, and OpenConfig(ctx, *Config) (*Driver, error).
//
// # Payload encryption
//
// Options.Codec seals every body Broker publishes and opens every body it
// receives (package codec provides AES-GCM envelope encryption), so a
// driver only ever stores sealed bodies. A Delivery from Broker.Receive
// then carries the plaintext; code that hands it to the Driver directly
// (not through Broker's methods) passes Wire(d), the delivery as stored.
//
// # Reserved headers
//
// Header names starting with "switchyard-" are reserved. The framework uses
// the names declared in this package (HeaderHoldUntil, HeaderAttemptBase,
// HeaderHeldKey, HeaderRunAt, HeaderOrderSeq) and in package scheduler;
// drivers that keep their own fields in headers use a prefix of their own
// under it (for example "switchyard-msg-").
package broker
