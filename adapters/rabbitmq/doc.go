// Package rabbitmq is the Switchyard adapter for RabbitMQ (3.10 or later),
// built on github.com/rabbitmq/amqp091-go. Importing it registers the
// "rabbitmq" and "amqps" URL schemes with broker.Open.
//
// # URL
//
//	rabbitmq://user:pass@host:5672/vhost?namespace=prod&prefetch=256
//	amqps://user:pass@host:5671/vhost?namespace=prod&ca_file=/etc/ca.pem
//
// The path is the vhost ("" or "/" is "/", "/%2F" is "/" too). Credentials
// default to guest/guest. They are sent through SASL PLAIN and never appear
// in errors or logs. Query parameters (an unknown one is ErrInvalid):
//
//	namespace        queue-name prefix: queues are switchyard.<ns>.<lane>… (default "default")
//	tls              true for TLS on a rabbitmq:// URL (amqps:// implies it); default port 5671
//	ca_file, cert_file, key_file, server_name, tls_insecure_skip_verify   TLS settings
//	prefetch         most messages RabbitMQ pushes ahead to one consumer (default 256;
//	                 see Delivery semantics)
//	confirm_window   most unconfirmed publishes per driver (default 100)
//	delivery_limit   the work queues' x-delivery-limit (default 100; see below)
//	heartbeat        AMQP heartbeat (default 10s)
//	connect_timeout  dial and handshake timeout (default 5s)
//	confirm_timeout  longest wait for a publish confirm (default 30s)
//	idle_release     how long a consumer nobody receives from is kept (default 100ms)
//	max_message_size largest Message.Size accepted (default 16 MiB; keep it
//	                 below the server's max_message_size)
//	connection_name  prefix of the connection name shown by the server (default "switchyard")
//
// # Topology
//
// Per namespace and lane the adapter declares, on first use:
//
//   - switchyard.<ns>.<lane>: the work queue, a durable quorum queue with
//     x-delivery-limit and a dead-letter route to the lane's dead-letter
//     queue, at least once (x-dead-letter-strategy at-least-once, with the
//     x-overflow reject-publish it requires);
//   - switchyard.<ns>.<lane>.dlq: the dead-letter queue, a durable quorum
//     queue with x-delivery-limit 2147483647: operators list dead letters
//     by receiving and handing them back, which raises x-delivery-count,
//     and from RabbitMQ 4.0 a quorum queue without the argument drops a
//     message after 20 of those (a dead-letter queue declared by an earlier
//     version is used as it is, with a warning; do not set a lower
//     delivery-limit policy on dead-letter queues);
//   - switchyard.<ns>.<lane>.delay.<N>ms: delay queues, durable quorum
//     queues with no consumer whose expired messages dead-letter back to the
//     work queue at least once (x-dead-letter-strategy at-least-once,
//     x-overflow reject-publish); one per delay bucket (100 ms doubling up
//     to about 29 h).
//
// At-least-once dead-lettering closes a silent loss: with at-most-once (the
// previous version) a delayed message (a run-at, a retry with backoff)
// whose work queue could not be routed to when it expired (deleted, being
// recreated) was dropped. Now RabbitMQ's dead-letter worker keeps it in the
// delay queue and resends it until the work queue confirms it. The worker
// resends unconfirmed dead letters every
// dead_letter_worker_publisher_confirm_timeout (180 s by default), so such
// a message can come back up to 180 s after the work queue takes messages
// again, and while it waits it is counted nowhere (see Stats).
//
// A publish the broker refuses (basic.nack, as reject-publish does for a
// queue at a max-length set by policy) is resent after 10, 20, 40, 80 and
// 160 ms with a new copy ID, then returned as a transient error; a publish
// whose outcome is unknown (no confirm) is never resent. A consume or
// basic.get that finds its queue deleted (404) declares it again and
// retries once.
//
// Changing delivery_limit for existing queues fails with a permanent error
// (RabbitMQ's 406 PRECONDITION_FAILED): delete the queues or keep the value.
//
// # Upgrading
//
// Queue arguments cannot change in place. A work or delay queue declared by
// the previous version (at-most-once work queue, classic delay queue) is
// used as it is, with a warning (slog) per queue and connection, and keeps
// the previous version's at-most-once dead-lettering; any other mismatch is
// a permanent error naming the queue. Migrate a namespace as a whole, since
// all drivers of a namespace share its queues: stop every process of the
// namespace (or switch them to a new namespace, the simplest way), let the
// delay queues empty (Stats.Delayed 0) and the work queues drain, delete the
// namespace's switchyard.<ns>.<lane> and switchyard.<ns>.<lane>.delay.*
// queues (the .dlq queues are unchanged and can stay), and start the new
// version, which declares them with the new arguments. Messages left in a
// deleted queue are lost: drain first.
//
// # Capabilities
//
//   - MaxDelay 24h: run-at and nack delays use the delay queues; the
//     framework holds longer ones. A message waits in the bucket ≥ its delay
//     with a per-message TTL of exactly its delay, so it never comes back
//     early. RabbitMQ expires messages only at a queue's head, so one that
//     queued behind a longer delay of the same bucket can come back late, by
//     less than the bucket's width (at most its own delay).
//   - LeaseExtension: yes, enforced by the adapter (see Leases). MaxLease is
//     0, but RabbitMQ's consumer_timeout (30 min by default) closes a channel
//     that keeps a delivery unacked longer, whatever the lease: raise it on
//     the server for longer handlers.
//   - Dedup: no (Broker's DedupStore covers it). Ordering: no (the
//     framework's fallback). MaxAttempts: no (Broker dead-letters on
//     receive); x-delivery-limit is a safety net for a message that crashes
//     every consumer before Broker can see its attempt number. It counts
//     only deliveries nobody settled in a row (crashes, lost connections,
//     expired leases): Nack republishes the message with its attempt in a
//     header instead of requeueing it, so explicit retries never reach the
//     limit and a Message.MaxAttempts above delivery_limit is honoured.
//     Message IDs longer than 255 bytes (an AMQP short string) travel in
//     the envelope only, not in the message-id property.
//   - DeadLetterReasons: yes. MaxBatch: none. OldestReadyAge: no.
//
// # Delivery semantics
//
// Publishing is persistent with publisher confirms and a bounded window: a
// publish counts as done only after its confirm. A negative confirm is a
// transient error (not enqueued); a confirm that never arrives (channel
// closed, confirm_timeout, ctx) is ErrUnknownOutcome.
//
// Messages carry the portable fields in broker.EncodeEnvelope's encoding as
// the body. A body that does not decode is dead-lettered by Receive with
// ReasonUndecodable and never returned.
//
// A nack republishes the message (with its attempts so far in AMQP header
// switchyard-prior-attempts); a nack that carries the failed attempt's
// error (broker.NackErrorer, which the scheduler uses for every retry)
// also sets AMQP header switchyard-last-error, so the management UI's "Get
// messages" shows why the task is retrying.
//
// Receive consumes with manual acks. A consumer tag is started with the
// prefetch the waiting Receive needs (its Max, at most prefetch), so a
// process takes from the queue only what it asked for; when a caller holds
// every message of a tag and asks for more, the tag is cancelled (nothing is
// in flight to it then) and one with fresh credit is added: prefetch bounds
// what RabbitMQ pushes ahead, not how many leases a caller may hold. Tags
// nobody has received from for idle_release are given up and the messages
// they buffered are returned (republished with their attempt count, then
// acked). A tag is cancelled only when it has no credit left: cancelling a
// quorum-queue consumer while RabbitMQ is delivering to it returns that
// message with x-delivery-count raised, unseen by the client. So an idle
// tag with credit drains: what RabbitMQ pushes to it is republished at
// once and the original held unacked until the tag's credit is used up,
// then the tag is cancelled and the originals acked. Wait 0 uses
// basic.get.
//
// The default prefetch is 256 (100 before issue 15's eleventh pass): the
// open credit of a driver's tags never exceeds it, and at 100 it sat below
// the 128 a Server with the default 64 slots asks for per lane, so a
// draining Server kept cancelling used-up tags and starting new ones.
// Measured with `switchyard bench runtime` (20,000 tasks, 8 goroutines ×
// EnqueueMany of 100, six alternated pairs of prefetch=100 and 256 on a
// loaded machine): full-drain enqueue → start p50 0.6–1.8 s → 47–216 ms;
// throughput over the batched raw client, median 0.65 → 0.70 (ranges
// overlap); one Enqueue per call unchanged; at 1,000 tasks/s p99
// unchanged (16 vs 15 ms) and p50 1.6 vs 1.1 ms, within the runs' spread
// (docs/BENCHMARKS.md, issue 15, eleventh pass).
//
// Attempts come from the quorum queue's x-delivery-count plus a header the
// adapter sets when it republishes (delayed nack, release, close): attempt
// = prior + x-delivery-count + 1. RabbitMQ raises x-delivery-count on every
// return, so a message pushed to a consumer that dies (or closes) before
// handing it out comes back with one attempt more than it was handed out.
//
// # Leases
//
// RabbitMQ keeps an unacked message with its channel until the channel
// closes, so the adapter enforces leases: when a lease ends, a timer
// requeues the message (basic.nack, requeue), which raises its attempt.
// Ack, Nack, Extend and DeadLetter on a delivery whose lease ended return
// ErrLeaseLost without touching the channel (a second ack of a delivery tag
// would close it). Extend moves the timer. Close returns leased messages so
// that they reappear when their leases would have ended. A process that
// dies loses its connection, and RabbitMQ requeues its messages at once.
//
// # Errors and recovery
//
// AMQP reply codes are classified by a table (codeClass); anything else,
// network errors included, is transient. When the broker closes the
// connection the adapter reconnects with backoff (50 ms doubling to 5 s);
// meanwhile calls fail with transient errors (Receive waits up to its Wait
// for the connection first), deliveries of the lost channels are requeued
// by RabbitMQ and their Ack returns ErrLeaseLost.
//
// # Stats
//
// Ready is the work queue's ready count (a passive declare) plus messages
// this driver buffered and has not handed out; InFlight is this driver's
// own live leases (RabbitMQ's unacked count cannot be read without the
// management plugin, and cannot tell leases from prefetch); Delayed is the
// sum over the delay queues; DeadLettered is the dead-letter queue's count.
// A delayed message that expired and that RabbitMQ's dead-letter worker
// holds because the work queue did not confirm it is in none of them until
// it is resent (up to dead_letter_worker_publisher_confirm_timeout, 180 s
// by default, later).
//
// # Limits of the server
//
// Every quorum queue reserves file handles on the server (about three
// each): a node whose open-files limit is 1,024 stops accepting connections
// at around 300 quorum queues. Each lane in use costs two (work and
// dead-letter queue) plus one per delay bucket it has used (delay queues
// are quorum queues since at-least-once dead-lettering needs them, and a
// quorum queue costs its handles, a Raft log and a dead-letter worker even
// when idle): a lane retrying with several backoffs can hold ten or more.
// Raise the node's open-files limit accordingly.
//
// Deleting a quorum queue while a driver publishes to it can make RabbitMQ
// 3.x close the publishing connection (the driver reconnects; publishes in
// flight end with ErrUnknownOutcome): delete queues only while idle.
//
// Cost (BenchmarkPath, docs/BENCHMARKS.md, issue 15, eleventh pass): on a
// quiet machine no measurable cost on the delay path (1.02–1.10× the
// previous version) and a few percent at most on the direct path
// (0.94–0.96×); under load the runs were too noisy to tell
// (delay 0.89–1.12×), and an earlier measurement put the delay path at
// 0.77×: budget up to a quarter less throughput for delayed messages.
// Through the public path (switchyard bench runtime --delay 50ms, twelfth
// pass, 5 alternated pairs at load 6–13) the per-call Enqueue rows were
// unchanged (direct 1.00×, delayed 0.94×; at 500 tasks/s p50 6.0 → 9.2 ms
// after the run time), but a burst of 10,000 delayed tasks enqueued in
// batches came back 0.70× as fast (every pair below 1) with a p50 of 2.3 s
// instead of 0.27 s after their run time: expired messages now leave a
// delay queue through its dead-letter worker, which waits for the work
// queue's confirms with at most dead_letter_worker_consumer_prefetch (32
// by default) in flight. That setting is the limit: raised to 256 on the
// broker (rabbitmq.conf: dead_letter_worker_consumer_prefetch = 256; it
// applies to delay queues whose leader starts afterwards), the same burst
// ran 3,618 and 4,673 tasks/s with a p50 of 0.19 and 0.14 s after the run
// time, against 2,986 and 2,580 tasks/s and 1.4 and 1.7 s at 32 (two
// alternated pairs). A deployment that enqueues delayed work in bursts
// should raise it; the adapter cannot.
//
// The same dead-letter workers are supervised by rabbit_fifo_dlx_sup,
// which on RabbitMQ 3.10 allows one restart in 5 s. A worker crashes when
// its queue is deleted as it starts (seen when a cleanup deleted the
// queues a killed process had declared a millisecond before); two such
// crashes together stop the supervisor for good, and from then on every
// declaration of a queue with at-least-once dead-lettering fails with
// INTERNAL_ERROR (541), broker-wide, until an operator restarts it
// (`rabbitmqctl eval 'supervisor:restart_child(rabbit_sup,
// rabbit_fifo_dlx_sup).'`, or the node). `rabbitmqctl eval
// 'whereis(rabbit_fifo_dlx_sup).'` printing undefined is the sign; this
// repository's CI watches for it (.ci/run). A declaration whose caller gave
// up (a cancelled Receive or Publish) goes on to the broker's answer, and
// Close waits up to 5 s for declarations and deletions in progress before
// it closes the connection, so a process stopped with Close leaves no
// declaration for the broker to complete; stop processes with Close
// before deleting their queues. A process that is killed can still leave
// one: wait a few seconds before deleting what it declared.
//
// Several processes that start on a fresh lane at once make RabbitMQ 3.10
// close one of their connections (541 INTERNAL_ERROR; the broker log shows
// a channel crash, {badmatch,{error,noproc}} in rabbit_quorum_queue:
// consume/3). The first declaration of a quorum queue records it and then
// starts its Raft server; a concurrent declaration by another connection
// finds the record and returns declare-ok at once, and a basic.consume
// that reaches the queue before its server has started crashes the
// channel, which takes the connection with it. The driver cannot avoid
// it: a passive declare answers the same (it counts an unreachable queue
// as empty), and the broker, not the driver, closes the connection, so
// there is no channel to retry on. Measured here (RabbitMQ 3.10.8, four
// drivers of one process each calling Receive on the same new lane at
// once): one connection of four closed in 9 of 10 rounds, and in 11 of
// 10 with a passive declare before each consume. The driver reconnects
// at once; the Receive that hit it returns a transient error, publishes
// in flight on that connection end with ErrUnknownOutcome and its leases
// with ErrLeaseLost (RabbitMQ requeues their messages with an attempt
// spent). RabbitMQ fixed the crash upstream (rabbitmq-server pull request
// 13625, 2025, which returns the error to the consumer instead). To avoid
// it on 3.10, let one process touch a new lane first (a Publish or a
// Receive declares it) before the others start: with one driver's Receive
// first, none of the other three lost its connection in 10 rounds.
//
// # Testing
//
// Tests use testenv.RabbitMQ (SWITCHYARD_RABBITMQ_URL, else
// amqp://guest:guest@127.0.0.1:5672/). The reconnect and outage tests also
// need rabbitmqctl on the same machine; they create a user of their own and
// close only its connections. The at-least-once tests set the broker's
// dead_letter_worker_publisher_confirm_timeout to 1 s while they create
// their queues (rabbitmqctl eval; serialised by an flock on
// /tmp/switchyard-rabbitmq-dlx-env.lock) and restore the value they read;
// they apply policies to their own queues only.
// TestMultiProcess_DelayedAtLeastOnce runs the test binary again as
// producer and worker processes (through the public Client and Server)
// and SIGKILLs some of them; it deletes its own namespace's work queue
// and takes about 35 s.
//
//	SWITCHYARD_REQUIRE_BROKERS=1 go test ./adapters/rabbitmq/ -count=1
//	go test ./adapters/rabbitmq/ -run '^$' -bench Throughput -benchtime 1x
package rabbitmq
