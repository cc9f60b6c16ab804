// Package awslambda runs a Switchyard Server's handlers inside an AWS
// Lambda function fed by SQS event-source mappings, with the semantics of
// a running Server:
//
//	b, _ := broker.Open(ctx, "sqs://?region=eu-west-1&namespace=prod")
//	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: l})
//	switchyard.Register(srv, summarise, nil)
//	fn, err := awslambda.New(srv, nil)
//	if err != nil { log.Fatal(err) }
//	lambda.Start(fn.Handle)
//
// # One record, one delivery
//
// Each record of the events.SQSEvent is mapped to its lane by the queue
// named in its event source ARN (the SQS adapter's queue names,
// sqs.Driver.LaneOfQueue), turned into a broker.Delivery the SQS adapter
// can settle (sqs.Driver.DeliveryFromRecord), passed through the receive
// fallbacks (broker.Broker.Accept: held copies, the attempt limit, ordering
// keys, sealed bodies) and run by the Server's own scheduler
// (scheduler.Scheduler.RunDelivery): the ledger's records, memoised Steps
// and once-only Effects, middleware (budgets, rate limits, tracing),
// retries with backoff by changing the message's visibility,
// Snooze/RetryAfter, Permanent and Budget dead letters with their reasons
// in the lane's dead-letter queue, where `switchyard dlq ls` shows them.
//
// # Partial batch response
//
// Handle returns events.SQSEventResponse listing in batchItemFailures
// exactly the records that must come back: those the adapter made visible
// again (a retry after its backoff, a deferral) and those nothing settled
// (a settle call failed, a handler still running at the deadline). A
// record the run deleted — completed, dead-lettered, or given back as a
// fresh copy (a snooze, a hand-back) — is reported as done. Acks delete
// the message at once rather than leaving it to the mapping, so that work
// already finished stays finished if the invocation dies later. Turn on
// ReportBatchItemFailures in the event-source mapping: without it the
// mapping deletes the whole batch on a normal return.
//
// # The function's deadline
//
// A record is started only if its kind's expected duration (Options.Estimate;
// by default the p90 of that kind's runs in this execution environment,
// zero before there are any) plus Options.Reserve still fits before the
// invocation's deadline. One that does not is handed back unstarted with
// Broker.Release: a fresh copy of the message, visible at once, with the
// same attempt number, and the record is deleted. Handing back beats
// reporting it failed: a failed record stays invisible for the rest of the
// queue's visibility timeout (AWS advises six times the function's
// timeout), and its receive count would grow towards the queue's
// maxReceiveCount without any attempt made. If Release fails, the record
// is reported failed instead, so nothing is lost.
//
// Running handlers get a context that ends Options.Reserve before the
// deadline; one that stops for it is recorded in the ledger as returned
// unfinished and handed back the same way (its Steps and confirmed
// Effects stay memoised for the next run). Handle itself returns by the
// deadline minus Options.Reserve/4 whatever the handlers do: a record
// still running then is reported failed and comes back after its
// visibility timeout, where the ledger's lease keeps a second copy from
// starting beside the first — the Lambda timeout (or SIGKILL) case.
//
// # FIFO queues
//
// Records of one message group run one after another in event order;
// groups run side by side. At the first record of a group that is not
// done, the group's later records are not started: they are reported
// failed and made visible again at once (so that SQS does not hold the
// group until their visibility timeout ends), as AWS requires for FIFO
// partial batch responses.
//
// # Bad input
//
// Nothing fails the whole batch for one record. A record from a queue no
// served lane maps to, without a receipt handle, or beyond Options.MaxBatch
// is logged and reported failed (the queue's redrive policy ends its
// loop). A body that is not a Switchyard envelope is moved, as it came, to
// the lane's dead-letter queue with reason undecodable.
package awslambda
