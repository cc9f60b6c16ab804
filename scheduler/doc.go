// Package scheduler is Switchyard's worker runtime. It knows nothing of
// which broker it runs on.
//
// # What it does
//
// One pull loop per lane keeps a small buffer of leased deliveries
// (Config.Prefetch). Each free slot goes to a lane chosen by lanes.Policy
// (by the worker whose task freed it, the pull loop whose receive filled
// the buffer, or the dispatch loop) from what waits and how long it has
// waited: reserved slots
// first, then age-promoted lanes, minimum shares and weights. The handler
// runs with a context that is cancelled when the task's lease is lost, its
// timeout or deadline passes, or StopAndCancel is called. A heartbeat
// extends the leases of every held delivery every Config.Heartbeat (a third
// of the lease by default).
//
// # Handler results
//
// nil completes the task. Permanent dead-letters it at once; Cancel ends it;
// Snooze returns it after a delay without spending an attempt; RetryAfter
// sets the retry delay; UnknownOutcome retries by policy and marks effects
// for reconciliation; AwaitApproval parks it in the ledger for a reviewer;
// any other error retries with exponential backoff and full jitter
// (RetryPolicy) until the attempt limit, then dead-letters it with
// ReasonMaxAttempts and the whole attempt history. A panic is recovered and
// recorded with its stack, and counts as a failed attempt. Arguments that do
// not decode and kinds with no handler are dead-lettered (undecodable,
// unknown_kind) without running.
//
// # With a ledger
//
// Config.Ledger makes delivery twice harmless. Before running, the task is
// moved to running in the ledger in one guarded write (ledger.BeginRun)
// that also records the attempt and gives the run a ledger lease; the
// outcome and the next state are one more write (EndRun). A delivery of a
// task that already finished is acknowledged without running. A delivery
// of a task running elsewhere — a copy of its message, whatever its
// delivery count — is given back without spending an attempt until the
// holder's ledger lease could have ended: the heartbeat renews that lease
// (RenewLeases, one write per heartbeat for all of a worker's runs) for as
// long as the handler runs, even after its broker lease was lost, so a
// task is taken over only when its holder is known to be gone. A run the
// ledger says is no longer its own is cancelled.
// Step memoises outputs and Effect records side effects before and after,
// so a crash retry neither recomputes a finished step nor repeats a
// confirmed effect; an effect left pending by a crash is reconciled before
// anything repeats it. The ledger is written before the broker is settled,
// so a crash between the two leaves a redelivery that the ledger absorbs.
//
// # Pausing lanes
//
// Pause and Resume act in this process. With a ledger that implements
// ledger.LaneControls, the scheduler also reads the lanes paused there (by
// an operator, from any process) at Start and every
// Config.ControlInterval; a lane is paused while either says so. A paused
// lane receives nothing new and starts nothing; its running tasks finish.
// A failed read is logged and observed (EventControlFailed) and the last
// known pauses stay in force.
//
// # The fleet
//
// With a ledger that implements ledger.Servers, a started scheduler
// registers itself there (Config.WorkerID, host, pid, lanes, slots and
// how many are busy, Version, start time), refreshes the record every
// Config.Heartbeat and removes it when it stops. A record whose heartbeat
// is older than ledger.ServerGoneAfter heartbeats belongs to a server that
// died; the schedulers sharing the ledger prune such records after
// ledger.ServerPruneAfter. A failed registration is logged and retried at
// the next heartbeat; it never stops the scheduler.
//
// # Sandbox replays
//
// A delivery carrying HeaderSandbox (or, with a ledger, whose task record
// carries MetaSandboxOf) runs with Job.Sandbox set: the handler and its
// steps run as usual, but Effect records each effect as
// ledger.EffectWouldDo and returns nil without calling do. Everything else
// — retries, dead-lettering, unknown kinds — is as for any task.
//
// # Shutdown
//
// Stop stops fetching, returns unstarted deliveries without spending an
// attempt, and waits for running tasks until its context ends; then it
// cancels them and returns them the same way. Receives in flight are not
// cancelled (on SQS a cancelled receive leaves the messages it took leased
// until their lease ends): Stop waits for them, at most Config.PollWait
// and five seconds more, and returns what they bring the same way. StopAndCancel cancels at
// once. Both are safe to call twice. No signal handling happens here; that
// belongs to the program (cmd/switchyard does it).
package scheduler
