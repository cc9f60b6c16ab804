// Package sqs is the Amazon SQS adapter: a broker.Driver on
// github.com/aws/aws-sdk-go-v2/service/sqs, for standard and FIFO queues.
// Import it for its side effect of registering the "sqs" URL scheme:
//
//	import _ "github.com/switchyard-dev/switchyard/adapters/sqs"
//
//	b, err := broker.Open(ctx, "sqs://?namespace=myapp&region=eu-west-1", nil)
//
// It uses nothing emulator-specific: pointed at AWS with credentials it
// just works, and it is proven against the fauxqs emulator (see Testing).
//
// # URL
//
//	sqs://?namespace=myapp&region=eu-west-1&fifo=true&endpoint=http://127.0.0.1:9324
//
// The URL has no host, path or credentials. Parameters (unknown ones are
// an ErrInvalid error):
//
//   - namespace: prefix of every queue name; letters, digits and "-", at
//     most 48 characters. Default "switchyard".
//   - region: AWS region. Default: the AWS configuration chain (AWS_REGION,
//     the shared config profile, …). A region is required.
//   - endpoint: service endpoint override (BaseEndpoint), for emulators and
//     VPC endpoints. Default: the SDK's own resolution.
//   - fifo: use FIFO queues. Default false.
//   - create: create missing queues. Default true; with false the queues
//     must exist and the IAM policy can drop sqs:CreateQueue.
//   - max_receives: the RedrivePolicy maxReceiveCount of created queues,
//     1–1000. Default 100 (see Dead letters).
//   - max_message_size: MaximumMessageSize of created queues, 1024–1048576
//     bytes. Default 1048576 (SQS's default since 2025).
//   - sdk_max_attempts: HTTP attempts per SDK call, 1–10. Default 3.
//
// Credentials come only from the standard AWS configuration chain
// (environment, shared files, SSO, web identity, ECS/EC2 roles), never from
// the URL, and never appear in errors or logs.
//
// # Queues
//
// Each lane has its own queue and dead-letter queue, created lazily on
// first use:
//
//	<namespace>_<lane>          <namespace>_<lane>-dlq            (standard)
//	<namespace>_<lane>.fifo     <namespace>_<lane>-dlq.fifo       (FIFO)
//	<namespace>_<lane>-delay                                       (FIFO: delayed messages)
//
// A lane name with "." or ":", or too long for SQS's 80-character limit,
// is sanitised and suffixed with a hash of the full name, so distinct lanes
// never share a queue. The live queue's RedrivePolicy points at its
// dead-letter queue; dead-letter queues keep messages for 14 days.
//
// # Capabilities
//
//	MaxDelay          15m (DelaySeconds); Broker holds longer delays
//	MaxLease          12h (the visibility timeout's maximum)
//	LeaseExtension    yes (ChangeMessageVisibilityBatch)
//	Dedup             FIFO only, 5-minute window (MessageDeduplicationId);
//	                  standard queues use Broker's DedupStore
//	Ordering          FIFO only (MessageGroupId)
//	DeadLetterReasons yes (record in a message attribute)
//	MaxAttempts       no: Broker enforces Message.MaxAttempts on receive;
//	                  the redrive policy is the crash backstop
//	MaxMessageSize    3/4 of max_message_size minus 298 bytes of envelope
//	                  (786,134 bytes at 1 MiB): what a binary body fits;
//	                  the limit does not depend on the body's content
//	MaxBatch          10
//
// # Delivery semantics
//
// SQS bodies are text. A message whose Body is valid SQS text (JSON, say)
// travels as "~" + base64 of its envelope without the body
// (broker.EncodeEnvelope) + "\n" + the Body as it is; any other message as
// base64 of its whole envelope. Publish uses
// SendMessageBatch (10 entries and at most 1 MiB per call); the driver
// implements broker.PublishConcurrency (two requests in flight), so
// concurrent Publish calls of one message each (Client.Enqueue from many
// goroutines) share requests. Receive uses
// ReceiveMessage with up to 10 messages and long polling in whole seconds
// (a sub-second rest of the wait is spent in short polls 100 ms apart, so a
// poll never outlasts the caller's wait).
//
// The lease is the visibility timeout, rounded up to whole seconds (at
// least 1). Delivery.LeaseDeadline is computed from when the response
// arrived less 250 ms, and never after the request was sent: it may be
// early by that much, never late. Extend is ChangeMessageVisibilityBatch;
// a delivery whose reported deadline has passed gets ErrLeaseLost without
// a call, since another consumer may hold it. Nack is
// ChangeMessageVisibility with the delay rounded up to whole seconds. Ack
// is DeleteMessageBatch. Attempt is ApproximateReceiveCount. SQS accepts a
// stale receipt handle on standard queues and keeps the message, so a
// stale Ack is harmless; where SQS reports ReceiptHandleIsInvalid or
// MessageNotInflight the error is ErrLeaseLost.
//
// Delays: on standard queues, DelaySeconds (up to 15 minutes; Broker
// re-publishes beyond). FIFO queues accept no per-message delay, so a FIFO
// message with a future RunAt goes to the lane's standard delay queue
// with DelaySeconds, and every consumer of the lane runs a mover that
// long-polls it and moves due messages into the FIFO queue (send, then
// delete; a crash in between is deduplicated by SQS). A mover that fails
// backs off from one second to one minute and warns in Config.Logger
// (with the error, at most once a minute, and once when it recovers).
// A delayed FIFO message joins its ordering group when it is moved. As a
// safety net, any live message received before its RunAt (clock skew, a
// clamped delay) is deferred by setting its visibility to the time left;
// that receive is not counted as an attempt (judged by
// ApproximateFirstReceiveTimestamp).
//
// FIFO ordering and deduplication: OrderingKey is the MessageGroupId. A
// message without an ordering key gets a group of its own (its ID), so
// unordered messages never wait behind each other; this is a deliberate
// choice, and AWS's high-throughput FIFO mode favours many groups. SQS
// does not return a group's messages while one is in flight, but may
// return several of one group in one response: the driver hands out the
// first and holds the others, leased and extended along with it, until it
// is acked or dead-lettered (a nack or a lost lease releases them to SQS
// at once). IdempotencyKey becomes MessageDeduplicationId (a hash of
// tenant and key), deduplicated by SQS per queue for 5 minutes, across
// processes. The second publish reports Duplicate with the first ID when
// the same process published the first; from another process SQS drops
// the copy silently. Messages without a key get a deduplication ID derived
// from their ID and delay state, so a retried send is dropped but Broker's
// re-publications of a held message are not.
//
// # Dead letters
//
// DeadLetter sends the message to the lane's dead-letter queue with the
// record (reason, error, attempt history; JSON of broker.DeadLetter) in
// the switchyard-dead-letter message attribute, then deletes it from the
// live queue: a crash in between leaves it in both, never in neither. A
// record too large for the queue loses older attempts, then the history
// and most of the error text. A body that is not a Switchyard envelope is
// moved by the driver's Receive as it is, with ReasonUndecodable; Broker
// never sees it. SQS's own redrive (after max_receives receives, e.g. a
// message that crashes every consumer before Broker's attempt check can
// run) moves messages without a record: they come out of the dead-letter
// queue with ReasonDeliveryLimit. Every receive counts toward it, nacks
// included, so Publish refuses (ErrInvalid) a message whose MaxAttempts is
// above max_receives (at most 1,000, SQS's own cap) rather than let the
// redrive cut its attempts short. Replay
// sends a dead letter back as a new SQS message (attempts restart at 1)
// and deletes it from the dead-letter queue.
//
// Stats: Ready, InFlight and Delayed are the live queue's
// ApproximateNumberOfMessages, …NotVisible and …Delayed (plus, for FIFO,
// everything in the delay queue as Delayed); DeadLettered is everything in
// the dead-letter queue. SQS's counts are approximate and lag by up to a
// minute.
//
// # Errors
//
// Errors are classified from the SDK's API error codes with a table
// (errors.go): throttling (RequestThrottled, ThrottlingException,
// KmsThrottled, OverLimit…) and server faults are transient; access
// (AccessDenied, InvalidClientTokenId, KMS access…) and validation
// (InvalidParameterValue, ValidationException…) are permanent;
// ReceiptHandleIsInvalid and MessageNotInflight are ErrLeaseLost. Codes
// not in the table are permanent for HTTP 401/403 (413 is ErrTooLarge)
// and transient otherwise; a failed batch entry with an unknown code that
// SQS marks as the sender's fault is permanent (ErrInvalid).
// A transport error on a publish after the request may have been sent is
// ErrUnknownOutcome; a refused connection is transient. Context errors
// stay recognisable with errors.Is. The adapter never retries by itself:
// the SDK's standard retryer makes up to sdk_max_attempts attempts per
// call (default 3, jittered backoff capped at 2 s, with its client-side
// retry quota), and the error returned after that is the one the
// scheduler retries with its own policy. Set sdk_max_attempts=1 to leave
// all retrying to the scheduler.
//
// A retried ReceiveMessage whose first response was lost (a connection
// reset while reading it) would leave the messages that attempt took
// leased to nobody until their visibility timeout ends, when they come
// back as any expired lease does. On FIFO queues every receive carries a
// fresh ReceiveRequestAttemptId, which the SDK's retries resend, so SQS
// answers the retry with the lost attempt's messages. Standard queues have
// no such parameter (nor does the emulator fauxqs 1.9.2 honour it).
//
// A Receive whose context ends while a ReceiveMessage call is out returns
// the context's error — a long poll at once, a short poll (WaitTimeSeconds
// 0, which ends within its round trip) when its response has come — but
// the call is not cancelled: SQS leases a receive's messages
// before its response is read, and a call cancelled mid-response (the SDK
// logs "failed to discard remaining HTTP response body") would leave them
// leased to nobody until their visibility timeout ends. The call runs on
// (until Close, or 30 s beyond its wait), and what it brings is made
// visible again at once with ChangeMessageVisibilityBatch; that delivery
// counts in ApproximateReceiveCount, so the next one has the next attempt
// number. The scheduler does not cancel its receives at Stop (it lets them
// finish and gives their messages back unspent), so this is for other
// callers and for a Stop whose context ends first.
//
// # IAM
//
// The least-privilege policy, for namespace "myapp" (FIFO names are
// covered by the same pattern):
//
//	{
//	  "Version": "2012-10-17",
//	  "Statement": [{
//	    "Effect": "Allow",
//	    "Action": [
//	      "sqs:CreateQueue",
//	      "sqs:GetQueueUrl",
//	      "sqs:GetQueueAttributes",
//	      "sqs:SendMessage",
//	      "sqs:ReceiveMessage",
//	      "sqs:DeleteMessage",
//	      "sqs:ChangeMessageVisibility"
//	    ],
//	    "Resource": "arn:aws:sqs:eu-west-1:123456789012:myapp_*"
//	  }]
//	}
//
// The batch APIs are authorised by their single-message actions. Drop
// sqs:CreateQueue with create=false. Queues encrypted with a customer KMS
// key also need kms:GenerateDataKey and kms:Decrypt on that key.
// Publishers alone need only GetQueueUrl, GetQueueAttributes and
// SendMessage (and CreateQueue unless create=false). Listing lanes
// (Driver.Lanes, for operator tools) also needs sqs:ListQueues.
//
// # Testing
//
// The tests run against the endpoint in SWITCHYARD_SQS_ENDPOINT, an
// SQS-compatible emulator on loopback started by .ci/sqs-emulator.sh
// (fauxqs 1.9.2, which speaks the AWS JSON protocol); without it they skip,
// or fail with SWITCHYARD_REQUIRE_BROKERS=1. The tests set static dummy
// credentials in the environment when none are set.
//
//	eval "$(.ci/sqs-emulator.sh start)"
//	SWITCHYARD_REQUIRE_BROKERS=1 go test -race ./adapters/sqs/
//	go test ./adapters/sqs/ -run '^$' -bench EndToEnd -benchtime 1x
//	.ci/sqs-emulator.sh stop
//
// The broker-level and end-to-end conformance suites and the chaos case
// (1,000 tasks on worker processes SIGKILLed at random; -short skips it)
// run for standard and FIFO queues; the outage case goes through a TCP
// proxy that drops every connection. Each case's queues are deleted
// afterwards. The
// emulator is exact and immediate where SQS is approximate, accepts bogus
// and stale receipt handles, and returns small FIFO batches, so no test
// asserts on those behaviours either way, and every timing assertion polls
// with tolerance, so the same tests hold against AWS.
package sqs
