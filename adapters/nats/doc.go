// Package nats is the Switchyard driver for NATS JetStream, on
// github.com/nats-io/nats.go and its jetstream package. Importing it
// registers the URL scheme "nats" with broker.Register.
//
// # URL
//
//	nats://[user:password@|token@]host[:4222]/[namespace][?param=value…]
//
// The namespace (default "default") may also be given as ?namespace=. Names
// outside [A-Za-z0-9_-] are mapped to a NATS token with a hash suffix.
// Parameters, each with its default:
//
//	ack_wait=30s         the consumers' AckWait: the shortest lease, and how long
//	                     a crashed consumer's message waits before redelivery
//	max_deliver=100      the consumers' MaxDeliver (-1: unlimited); see below
//	dedup_window=2m      the stream's duplicate window (Nats-Msg-Id)
//	pull_expiry=5s       the longest single Fetch; bounds a lost pull's stall
//	publish_timeout=5s   how long a publish waits for its acknowledgement
//	connect_timeout=5s   dial and JetStream API timeout
//	max_ack_pending=-1   the consumers' MaxAckPending (-1: unlimited); pull
//	                     consumers deliver only what Receive asks for, and
//	                     a limit that is reached makes no-wait pulls linger
//	max_batch=1000       Capabilities.MaxBatch
//	replicas=1           stream replicas
//	storage=file         file or memory
//	name=switchyard      the connection name the server shows
//	token=…              a token (instead of token@host)
//	creds=/path          a .creds file (JWT + nkey)
//	nkey=/path           an nkey seed file
//	tls=true             TLS; implied by tls_ca, tls_cert or tls_insecure
//	tls_ca=/path  tls_cert=/path  tls_key=/path  tls_insecure=false
//
// Unknown parameters are an ErrInvalid error. Passwords and tokens never
// appear in errors or logs.
//
// # Topology
//
// For namespace NS the driver creates (or finds and checks):
//
//   - stream SY_NS, work-queue retention, subjects sy.NS.live.<lane> (ready
//     messages) and sy.NS.delayed.<lane> (messages whose RunAt is ahead);
//   - stream SY_NS_DLQ, work-queue retention, subjects sy.NS.dlq.<lane>;
//   - stream SY_NS_ADV, capturing the server's MAX_DELIVERIES advisories
//     for SY_NS, so that none is lost while no driver runs;
//   - one durable pull consumer per lane and stream (live-<lane>,
//     dlq-<lane>), explicit ack, filters disjoint as work-queue streams
//     require; a consumer "delayed" on the delayed subjects and
//     "advisories" on SY_NS_ADV.
//
// NATS 2.9 silently updates a consumer on create and ignores options it does
// not know (FilterSubjects, per-message TTL), so the driver never relies on
// them: it reads every stream and consumer back and refuses, with an
// ErrInvalid error that says what differs, one whose retention, subjects,
// storage, filter, ack policy, AckWait, MaxDeliver or MaxAckPending is not
// what the URL asks for. Open two processes on a namespace with the same
// settings.
//
// Messages travel as broker envelopes (broker.EncodeEnvelope) in the body;
// the driver's own state is in headers (Nats-Msg-Id, Sy-Run-At,
// Sy-Dead-Letter, Sy-Id, Sy-Attempt).
//
// # Capabilities and semantics
//
//   - Leases: the server's lease is AckWait. A longer ReceiveRequest.Lease
//     or Extend is kept alive by the driver with InProgress every half
//     AckWait until it is covered (MaxLease 0); the lease then ends between
//     the requested deadline and half an AckWait after it. A shorter one
//     lasts AckWait. LeaseDeadline always reports the real deadline,
//     measured from before the request, so it errs early. Ack, Nack, Extend
//     and DeadLetter after the deadline return ErrLeaseLost and send
//     nothing: JetStream would apply a stale ack to the new holder's
//     delivery.
//   - Receive uses Fetch, never Consume: it takes what is ready with a
//     no-wait pull and otherwise waits with pulls of at most pull_expiry,
//     so a pull lost by the server (a restart) stalls delivery for at most
//     one expiry. A waiting Receive returns on its first message, topped up
//     with whatever else is ready. A waiting pull the server has not
//     answered a quarter of its expiry (at least 250 ms) after it expired
//     is given up and pulled again, rather than waiting out nats.go's own
//     expiry plus one second: on NATS 2.9.10 a pull now and then gets
//     neither a message nor its 408, and every message published meanwhile
//     waited that second. Messages that still arrive for a given-up pull
//     are handed back with a Nak (which counts a delivery).
//   - Attempts are the delivery count from the message metadata; replayed
//     messages are new messages and start at 1. NATS 2.9.10 can report 1
//     for a redelivery: when a redelivered message (lease ended) finds only
//     expired or abandoned pulls waiting, the server steps its next-sequence
//     back although the message came from its redelivery queue, and
//     delivers the message at that sequence again as a first delivery
//     (seen: stream sequence 1 delivered with consumer sequences 1 and 2,
//     both with delivery count 1). Reproduced every time with the raw
//     client: deliver a message, leave it unacked, send a pull request and
//     unsubscribe its inbox, wait out the AckWait, pull: delivery count 1
//     again. In the driver it is rare (2 in 40 runs of the conformance case
//     CloseWithoutAck, 8 in parallel on a loaded machine, where the new
//     consumer's pull expired as the old delivery's AckWait ended); such an
//     attempt undercounts by one or more, and a message can then be
//     delivered again while another consumer holds it.
//   - Nack: NakWithDelay (Nak for no delay); attempts grow.
//   - Delays: a message with RunAt ahead goes to the lane's delayed subject;
//     a background loop nacks it until due and then moves it to the live
//     subject (MaxDelay 0: any length). Moves are deduplicated, so a crash
//     mid-move stores one copy.
//   - Attempt limit: Broker enforces Message.MaxAttempts on receive
//     (Capabilities.MaxAttempts is false; MaxDeliver is per consumer, not
//     per message). As a safety net for messages that crash every consumer,
//     the consumer's MaxDeliver (max_deliver) stops delivery; JetStream then
//     keeps the message in the work queue for good and emits a
//     MAX_DELIVERIES advisory. The driver captures the advisories in a
//     stream and moves each such message (read by stream sequence) to the
//     dead-letter stream with broker.ReasonDeliveryLimit, then deletes it
//     from the live stream. The server notices the limit when a consumer
//     next pulls. MaxDeliver counts every delivery, nacks included, so
//     Publish refuses (ErrInvalid) a message whose MaxAttempts is above
//     max_deliver rather than let the broker cut its attempts short: use
//     max_deliver=-1 (unlimited; Switchyard enforces MaxAttempts) for
//     larger limits. An existing consumer keeps its MaxDeliver; opening
//     with another value is refused (see Topology).
//   - Dead letters keep reason, error and attempt history (a JSON record in
//     a header; very long histories are trimmed to fit). Undecodable
//     messages are dead-lettered by Receive with broker.ReasonUndecodable
//     and never returned. Replay publishes the stored envelope back to the
//     live subject and removes the dead letter.
//   - Dedup: Nats-Msg-Id derived from lane, tenant and idempotency key,
//     within the stream's duplicate window (Capabilities.DedupWindow); the
//     ledger covers longer horizons. A duplicate reports the first
//     message's ID while that message is still stored.
//   - Ordering: not native (Capabilities.Ordering false); Broker's
//     sequencer — the ledger's, shared by every process — serialises
//     ordering keys (without one, keyed publishes are refused).
//   - MaxMessageSize is the server's max_payload less 64 KiB for headers.
//   - Stats: Ready is the consumer's NumPending, InFlight its NumAckPending,
//     Delayed the messages on the delayed subject, DeadLettered the messages
//     on the dead-letter subject, OldestReady the age of the first message
//     not yet delivered (Capabilities.OldestReadyAge). Nack delays are known to the process that
//     nacked only: it counts them as delayed, other processes as in flight.
//     Messages whose lease ended and wait for redelivery count as in flight.
//   - Reconnection: the client reconnects forever (250 ms apart, with
//     jitter); durable consumers on file storage resume after a server
//     restart.
//
// # Errors
//
// Errors are broker.Error values classified by a table of JetStream API
// error codes and client sentinels (errors.go); anything unrecognised is
// transient, context errors stay recognisable. A publish whose
// acknowledgement does not arrive within publish_timeout, or before its
// context ends, matches broker.ErrUnknownOutcome: retry it with the same
// idempotency key. While disconnected the client does not buffer (a
// publish fails at once, transient), so no call hangs in an outage.
//
// # Testing
//
// Tests use the server from conformance/testenv (SWITCHYARD_NATS_URL, else
// nats://127.0.0.1:4222) with a fresh namespace each, deleted afterwards.
// Tests that stop the server (restart, stall, ack timeout, the conformance
// Outage case) start a private /usr/sbin/nats-server on a free port and
// directory; they never touch the shared one.
//
//	SWITCHYARD_REQUIRE_BROKERS=1 go test -race ./adapters/nats/
//	go test ./adapters/nats/ -run '^$' -bench BenchmarkEndToEnd -benchtime 1x -count 1
package nats
