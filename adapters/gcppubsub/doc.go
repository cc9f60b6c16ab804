// Package gcppubsub is the Google Cloud Pub/Sub adapter: a broker.Driver
// on cloud.google.com/go/pubsub/v2's low-level admin clients (the raw
// Publish, Pull, Acknowledge and ModifyAckDeadline RPCs; the high-level
// streaming Subscriber hides the leases the contract needs). Import it
// for its side effect of registering the "gcppubsub" URL scheme:
//
//	import _ "github.com/switchyard-dev/switchyard/adapters/gcppubsub"
//
//	b, err := broker.Open(ctx, "gcppubsub://my-project?namespace=myapp", nil)
//
// # URL
//
//	gcppubsub://PROJECT?namespace=myapp&ordering=true&exactly_once=true
//	gcppubsub://switchyard-test?emulator=127.0.0.1:8085
//
// The host is the Google Cloud project ID; the URL has no port, path or
// credentials. Parameters (unknown ones are an ErrInvalid error):
//
//   - namespace: prefix of every topic and subscription; lowercase
//     letters, digits and "-", starting with a letter, at most 48
//     characters. Default "switchyard".
//   - emulator: host:port of a Pub/Sub emulator (pstest, Google's
//     emulator), reached in plaintext without credentials.
//   - endpoint: host:port of another service endpoint (a regional one).
//   - create: create missing topics and subscriptions. Default true; with
//     false they must exist, and the live subscription must have a
//     dead-letter policy (Pub/Sub counts delivery attempts only with one).
//   - max_deliveries: max_delivery_attempts of the dead-letter policy of
//     created subscriptions, 5–100. Default 100.
//   - ordering: create subscriptions with message ordering and publish
//     ordering keys natively. Default false.
//   - exactly_once: create subscriptions with exactly-once delivery.
//     Default false.
//   - max_message_size: the largest Pub/Sub message the driver sends,
//     65,536–10,000,000 bytes. Default 10,000,000 (Pub/Sub's limit).
//
// Credentials come only from Application Default Credentials (the
// environment, gcloud's files, the metadata server), never from the URL.
//
// # Topics and subscriptions
//
// Each lane has three topics, each with one subscription of the same ID:
//
//	<namespace>+<lane>          the live topic; its subscription has a dead-letter
//	                            policy pointing at the dead-letter topic
//	<namespace>+<lane>+dlq      the dead-letter topic
//	<namespace>+<lane>+delay    messages whose RunAt is ahead (see Delays)
//
// A ":" in a lane name is written "~" (Pub/Sub names have no ":"). Created
// subscriptions have a 10-second ack deadline (Pub/Sub's minimum: what a
// consumer that dies between a pull and setting its lease holds a message
// for) and keep unacknowledged messages 7 days (Pub/Sub's maximum).
//
// # Capabilities
//
//	MaxDelay          5m (the delay topic); Broker re-publishes longer delays in hops
//	MaxLease          10m (ModifyAckDeadline's maximum, 600 s)
//	LeaseExtension    yes (ModifyAckDeadline)
//	Dedup             no: Broker's DedupStore (Pub/Sub has none)
//	Ordering          with ordering=true (subscription message ordering);
//	                  otherwise Broker's sequencer
//	DeadLetterReasons yes (a record framed into the dead letter's data)
//	MaxAttempts       no: Broker enforces Message.MaxAttempts on receive;
//	                  the dead-letter policy is the crash backstop
//	MaxMessageSize    max_message_size − 8,490 bytes (9,991,510 by default):
//	                  the envelope's overhead and room for a dead-letter record
//	MaxBatch          1000 (Pull's and Publish's limit)
//
// # Delivery semantics
//
// A message's data is its Switchyard envelope (broker.EncodeEnvelope).
// Publish sends up to 1,000 messages and about 3 MiB per Publish call.
// Receive is the synchronous Pull RPC, up to req.Max messages: a wait of
// a second or more is one pull that Pub/Sub holds open with the rest of
// the wait as its deadline, a shorter rest is spent in immediate pulls
// 100 ms apart. The lease is the ack deadline: after the pull the driver
// sets it to the lease with ModifyAckDeadline (whole seconds, 1–600), and
// Delivery.LeaseDeadline is counted from before that call, so it may be
// early, never late. Extend is ModifyAckDeadline; a delivery whose
// reported deadline has passed gets ErrLeaseLost without a call. Nack is
// ModifyAckDeadline with the delay (0 gives it back at once). Ack is
// Acknowledge. Attempt is Pub/Sub's delivery_attempt, which it counts on
// subscriptions with a dead-letter policy (all those the driver creates).
// A receive whose caller gives up returns at once; its pull finishes in
// the background and gives back what it took (ModifyAckDeadline 0), which
// costs those messages one delivery attempt but no wait.
//
// Pub/Sub ignores an ack or deadline change whose ack ID is stale (the
// message was delivered again since), so a stale Ack never removes another
// consumer's delivery. With exactly_once=true Pub/Sub reports it: an ack
// ID that failed permanently is ErrLeaseLost, a transient failure is
// transient.
//
// Delays: Pub/Sub has no delayed delivery. A message whose RunAt is ahead
// is published to the lane's delay topic; every consumer of the lane runs
// a mover that pulls the delay subscription, sets the ack deadline of a
// message not yet due to the time left (at most 600 s, again as often as
// needed) and publishes a due one to the live topic, then acknowledges
// it. A crash between the two leaves a second copy with the same ID
// (Broker's and the ledger's duplicate handling cover it). Live messages
// are never early, and a delay costs no attempt.
//
// Ordering (ordering=true): the ordering key is Pub/Sub's. Pub/Sub
// delivers a key's messages in publish order; should one pull return two
// messages of one key, the driver hands out the first and gives the
// others back at once (each give-back counts a delivery attempt). Without
// ordering=true, keys are serialised by Broker's sequencer.
//
// # Dead letters
//
// DeadLetter publishes the message to the dead-letter topic with the
// attribute switchyard-dead-letter=1 and data framed as a length-prefixed
// record (JSON of broker.DeadLetter: reason, error, attempt history)
// followed by the original data (attribute values are capped at 1,024
// bytes, too small for the record), then acknowledges it on the live
// subscription: a crash in between leaves it in both, never in neither. A
// record too large for the message loses older attempts, then the history
// and most of the error text. Data that is not a Switchyard envelope is
// moved by Receive as it is, with ReasonUndecodable; Broker never sees
// it. Pub/Sub's own dead-letter policy (after max_deliveries deliveries,
// e.g. a message that crashes every consumer before Broker's attempt check
// runs) moves messages without the attribute: they come out of the
// dead-letter subscription with ReasonDeliveryLimit. Every delivery counts
// toward it, nacks included, so Publish refuses (ErrInvalid) a message
// whose MaxAttempts is above max_deliveries. Replay publishes a dead letter
// to the live topic as a new message (attempts restart at 1) and
// acknowledges it on the dead-letter subscription.
//
// On the real service the dead-letter policy needs the Pub/Sub service
// agent (service-PROJECT_NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com) to
// hold roles/pubsub.publisher on the dead-letter topic and
// roles/pubsub.subscriber on the live subscription.
//
// # Stats
//
// The Pub/Sub API has no queue depths: backlog counts exist only as Cloud
// Monitoring metrics (subscription/num_undelivered_messages), outside
// this API and minutes late. Stats checks that the lane's subscription
// answers (so readiness probes work) and reports zero counts; it is not a
// measure of the backlog. Tools that read depths see zeros: switchyard
// migrate, moving away from Pub/Sub, stops at the first empty receive, so
// run it once the delayed tasks are due (the delay topic is not counted)
// and check the source is empty with a receive. The driver does not implement broker.Browser:
// Pub/Sub cannot read a message without leasing it.
//
// # Errors
//
// gRPC status codes are classified with a table (errors.go): Unavailable,
// ResourceExhausted, Aborted, Internal, Unknown and DeadlineExceeded are
// transient; InvalidArgument, FailedPrecondition, OutOfRange and
// AlreadyExists are permanent ErrInvalid ("too large" is ErrTooLarge);
// NotFound, PermissionDenied and Unauthenticated are permanent;
// Unimplemented is ErrUnsupported. A publish that fails after its request
// may have reached Pub/Sub is ErrUnknownOutcome; a refused connection is
// transient. Context errors stay recognisable with errors.Is. The adapter
// never retries: the library's per-call retry settings are cleared, and
// the scheduler retries with its own policy.
//
// Limits, each refused with a typed error: a message above MaxMessageSize
// (ErrTooLarge at publish), MaxAttempts above max_deliveries (ErrInvalid
// at publish), a bad URL or parameter (ErrInvalid at open), an unknown
// lane name (ErrInvalid). Data received that is not an envelope, or whose
// ID, lane, kind or attempt limit is out of range, is dead-lettered with
// ReasonUndecodable.
//
// # Testing
//
// The tests run against pstest, Google's fake from the same module, which
// the test process serves on a loopback TCP port (pstest.NewServerWithAddress),
// so the child processes of the crash, chaos and fleet cases reach it
// over TCP while the process that owns it lives on; no service needs to
// run. SWITCHYARD_PUBSUB_EMULATOR=host:port points them at another
// emulator instead.
//
//	go test -race ./adapters/gcppubsub/
//	go test ./adapters/gcppubsub/ -run '^$' -bench . -benchtime 1x
//
// The broker-level and end-to-end conformance suites run with and without
// native ordering, plus the chaos case and the fleet ordering case; the
// outage case goes through a TCP proxy that drops every connection.
//
// What pstest does not emulate, and so the tests cannot show:
//
//   - queue depths (none exist in the API): the conformance Stats case and
//     the conformance DeadLetter case (which asserts depths) are skipped with
//     that reason; TestDeadLetterNoStats runs the dead-letter steps without
//     the depth checks;
//   - exactly-once delivery on Pull: pstest accepts the subscription flag
//     but never reports failed ack IDs, so ErrLeaseLost from an ack is not
//     exercised (the error parsing is unit-tested);
//   - a subscription's retry policy (backoff): pstest redelivers at once;
//     the driver does not use retry policies (Nack sets the delay);
//   - message retention: pstest drops an undelivered message after 10
//     minutes (Pub/Sub keeps it 7 days), one reason MaxDelay is 5 minutes;
//   - the dead-letter policy's IAM checks and the extra attributes Pub/Sub
//     adds to forwarded messages (CloudPubSubDeadLetterSource…); pstest
//     forwards at exactly max_deliveries deliveries, where Pub/Sub's count
//     is best effort;
//   - request size limits: pstest's gRPC server takes 4 MiB per request, so
//     the tests use max_message_size=1048576;
//   - ordering across regions and the real service's batching: pstest
//     delivers one message per ordering key at a time.
package gcppubsub
