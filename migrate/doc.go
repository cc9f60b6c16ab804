// Package migrate moves the messages of a namespace from one broker to
// another: ready, delayed and (optionally) dead-lettered messages, lane by
// lane, keeping each message's ID, kind, body, headers, idempotency key,
// ordering key, tenant, run-at, enqueue time and attempt limit, and each
// dead letter's reason, error and attempt history. It is the library behind
// `switchyard migrate`:
//
//	rep, err := migrate.RunURL(ctx, fromURL, toURL, nil, &migrate.Options{
//		Lanes:              lanes,              // --lanes; empty: every lane the source lists
//		IncludeDeadLetters: includeDead,        // --include-dead-letters
//		DryRun:             dryRun,             // --dry-run
//		Journal:            migrate.JournalPath(stateDir, fromURL, toURL),
//		Wait:               wait,               // --wait
//		Progress:           func(p migrate.Progress) { bar.Set(p.Moved + p.Skipped, p.Expected) },
//	})
//
// # Guarantees and what they rest on
//
// Publish before remove. Each round leases a batch on the source, publishes
// it to the target through a broker.Broker (validation, size limits,
// deduplication, long-delay holding), and acks the source only for messages
// the target confirmed. A message is therefore always on at least one
// broker; a failure or a kill at any point loses nothing, and the run can
// simply be repeated.
//
// Repeat without duplicates. Before publishing a batch the run appends its
// IDs to the journal (Options.Journal) as started, and after the target's
// confirmation as done, syncing the file each time. A rerun acks journaled
// "done" messages on the source without publishing them again (counted as
// Skipped). Only a kill in the instant between the target's confirmation
// and the journal's sync can leave a second copy on the target; the rerun
// reports those IDs in Report.InDoubt. The message ID is the guard that
// absorbs them: messages with an idempotency key are deduplicated by the
// target's native deduplication where it has one (embedded, asynq, NATS and
// SQS FIFO within their windows), and the ledger runs a task ID once in
// effect either way. (The target Broker's own dedup store is a fresh one per
// run, never the ledger: the ledger holds every key from the original
// publishes and would make each keyed message look already moved.)
//
// Namespaces. A migration moves one namespace to another broker; CheckURLs
// refuses URLs that name different namespaces (or the same broker twice).
//
// Failures. A message the target rejects (too large — SQS takes 256 KiB —
// or invalid there) is given back to the source unchanged and listed in
// Report.Failures; Run then returns an error matching ErrIncomplete. An
// unreachable target is found before anything is leased: Run returns the
// error and the source is untouched.
//
// # Delayed and leased messages
//
// No broker hands out a delayed message (a future run-at, a retry backoff)
// before it is due, so Run moves delayed messages only as they come due:
// it keeps waiting for up to Options.Wait after a lane's ready
// messages are moved, and reports what is still delayed in
// LaneReport.LeftDelayed. Messages leased by running workers are moved only
// once their lease ends (within Options.Wait too; LeftInFlight). For either, run again later, or
// switch the workers to broker.Migrating, which consumes the old broker
// until it is drained while new work goes to the new one.
//
// Messages the framework holds for a delay beyond the source's native
// maximum travel as hops; Run folds a hop back into the message (its real
// run-at and idempotency key) when it moves it. Ordering sequence numbers
// and attempt bases are the source's own state and are dropped: attempt
// counts of live messages start again at 1 on the target (the ledger keeps
// their history; dead letters carry theirs), and ordering keys keep their
// order as long as the source hands them out in publish order (every
// adapter does per key). A key numbered on a source without native
// ordering by the same Sequencer that numbers the target (the fleet's
// ledger, as the CLI's --ledger gives both) must not wait for its old
// numbers, which are never offered again: Options.SourceSequencer releases
// each as finished once the target has confirmed its copy (without it, the
// sequencer skips each old number as lost after its stall window, minutes
// per key).
//
// # Dead letters
//
// Brokers have no "publish into the dead-letter queue" operation, so a dead
// letter is published to the target's live lane, found there at once and
// dead-lettered with its original reason, error and history. The target
// lane must have no consumers while dead letters move (move them before
// starting the target's workers, or pause the lane); otherwise a worker
// could run the task. A dead letter not found within Options.FindTimeout is
// reported as a failure saying so.
//
// # Errors
//
// Invalid arguments and mismatched namespaces match broker.ErrInvalid;
// broker errors keep their class (broker.ClassOf) and context errors stay
// recognisable.
//
// # Testing
//
// go test ./migrate/ runs, for every ordered pair of adapters, 2,000 tasks
// in mixed states (ready, delayed, waiting for a retry, dead-lettered by a
// handler) migrated by a child process killed with SIGKILL halfway and then
// run again; it checks the target holds each task exactly once with its
// fields and the source is empty, then runs workers with the shared ledger
// on the target and checks every task completes with its effect performed
// exactly once. It also runs the live migration under running servers, the
// bad-input cases and the uninterrupted and dry runs. The real brokers come
// from the conformance/testenv endpoints; a case skips with the reason when
// one is unavailable (fails with SWITCHYARD_REQUIRE_BROKERS=1).
// docs/MIGRATION.md says what each test proves and what it costs.
package migrate
