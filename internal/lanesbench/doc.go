// Package lanesbench runs issue 4's lanes benchmark against the real
// runtime: a switchyard.Server with 8 handler slots, the interactive lane
// reserving 2 of them, on the embedded broker (a fresh file in a temp
// directory) or on any adapter by URL. Handlers only sleep for the task's
// duration, so every figure is the runtime's and the broker's own.
//
// # Scenarios
//
//	S1 light      10,000 batch tasks of 20 ms queued, then interactive at 20/s of 20 ms
//	S2 LLM-like      400 batch tasks of 1 s queued, then interactive at 5/s of 50 ms
//	S3 overload   10,000 batch tasks of 20 ms queued, then interactive at 400/s of 20 ms
//	S4 tenants    10,000 batch tasks of 20 ms of tenant "noisy" queued, then 100 of tenant "quiet"
//
// Each scenario runs twice: with its batch backlog (the load phase) and
// without it (the idle baseline: the same interactive arrivals, or S4's
// quiet tenant alone). The window (the 30 s) is Options.Duration.
// The backlog is published before the server starts (through
// broker.Publish in batches, the same messages Client.Enqueue would send);
// the window starts when Server.Start returns; interactive tasks arrive on
// a fixed schedule through Client.Enqueue.
//
// # What is measured
//
// Wait is enqueue → handler start: the enqueue time is read just before
// the publish and carried in the task's arguments, the start time is read
// first thing in the handler (both on this process's clock). For each
// phase the Report gives:
//
//   - interactive p50, p99 and max wait, and the load p99 against the idle
//     p99 (Report.InteractiveRatio);
//   - batch tasks started within the window, the longest gap between batch
//     starts (from the window's start to the first start, between starts,
//     and from the last start to the window's end while backlog remains),
//     and the batch share of slots (slot-time held by batch handlers within
//     the window over Slots × window);
//   - for S4, the quiet tenant's p50/p99 against its idle baseline
//     (Report.QuietRatio).
//
// Tasks that have not started when the phase is measured (the window plus
// a grace of up to Options.Grace for late interactive starts) count with
// the wait they had so far, and Waits.Censored says so: such a percentile
// is a lower bound.
//
// # Lanes
//
// BenchLanes is lanes.Defaults with one change: the scheduled lane
// reserves no slot (the issue reserves only interactive's 2, so batch
// competes for the other 6). interactive keeps weight 100, promotion age
// 500 ms and wait objective 100 ms; batch keeps weight 1, promotion age 2 s
// and a minimum share of 2 %; human-review stays manual. The runtime
// passes each lane's observed task duration (p90) to the policy, so the
// batch lane may borrow interactive's idle reserved slots for tasks short
// against interactive's wait objective.
//
// In S4 the batch lane is fair between tenants (Options.FairShards,
// broker.Options.Fair): it is split into 8 shard queues by tenant and the
// runtime's receives take from the non-empty shards in turn, so the quiet
// tenant's tasks start alongside the noisy tenant's backlog instead of
// behind it ("noisy" and "quiet" hash to different shards). FairShards -1
// measures the plain FIFO lane for comparison.
//
// # Running it
//
//	go test ./internal/lanesbench/ -run '^$' -bench Lanes -benchtime 1x -timeout 20m
//	go test ./internal/lanesbench/ -run '^$' -bench Lanes -benchtime 1x -lanes.duration 10s -lanes.broker 'nats://127.0.0.1:4222'
//
// Flags: -lanes.duration (window, default 30s), -lanes.broker (URL),
// -lanes.prefetch (the server's per-lane prefetch, default the scheduler's
// 2), -lanes.only (a scenario name prefix, e.g. S3).
//
// With a broker URL each phase gets a fresh namespace (the namespace query
// parameter every adapter accepts); the backlog left at the end of a phase
// stays in that namespace's queues. The quick test, TestScenarios, runs
// every scenario for a few seconds with smaller backlogs and checks only
// that batch makes progress and interactive is served.
package lanesbench
