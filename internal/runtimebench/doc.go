// Package runtimebench measures the whole runtime through the public API
// (issue 15): Client.Enqueue → Server → handler → ack, with the ledger off
// and on, beside the adapter's own loop on the same broker, in one process
// and one run. The `switchyard bench runtime` command, the root package's
// BenchmarkRuntime_* benchmarks and the peers module (bench/peers) all call
// it, so their figures compare.
//
// # Rows
//
//   - raw: the adapter's driver loop through broker.Broker
//     (internal/benchkit.EndToEnd): one publisher in batches of 100, two
//     consumers receiving and acking batches of 100, 64-byte bodies; from
//     the first publish to the last ack. It is the ceiling the runtime is
//     compared with (the adapters' own benchmarks compare this loop with
//     each broker's bare SDK: 0.76–1.0×).
//   - runtime, ledger off: Publishers goroutines each call Client.Enqueue
//     once per task (a small JSON argument carrying the enqueue time) while
//     a Server with a no-op handler runs; throughput is tasks from the first
//     Enqueue to the last EventSucceeded (which the scheduler observes after
//     the ledger's completion and with the ack handed to its batcher); the
//     latency is Enqueue call → handler start, p50 and p99 over all tasks.
//     At full drain that latency includes queueing; with Rate set the
//     publishers are paced and it is the latency at that rate.
//   - runtime, ledger on: the same with a ledger (a fresh PostgreSQL schema
//     or a fresh SQLite file per run).
//   - raw client, one publish per call and batched: the broker's own Go
//     client (rawclient.go; what each does is printed under the table).
//   - runtime, ledger off, EnqueueMany, batched raw client's shape
//     (ledger-off-batched): Publishers goroutines each calling
//     Client.EnqueueMany with chunks of 100 (10 on SQS), the shape of the
//     batched raw-client row (both go through publishers()), so the ratio
//     of the two is the runtime's own cost at the same shape.
//   - runtime, ledger off / on, EnqueueMany, 1 × 1,000 a call (the bulk
//     rows): one goroutine, 1,000 items a call, as river's InsertMany in
//     the peers module; another shape than the batched raw client, so the
//     table prints that ratio in parentheses.
//   - runtime, ledger on, Step + Effect: the handler runs one memoised
//     Step and one Effect per task.
//
// # CPU per task
//
// Client CPU per task is this process's user+system time (getrusage)
// during the run, divided by the tasks; it includes the server side of the
// runtime, since both run here. PostgreSQL CPU per task is, when the
// ledger's server is on this machine (host 127.0.0.1, ::1 or localhost),
// the growth during the run of utime+stime+cutime+cstime
// (/proc/<pid>/stat fields 14–17) summed over every process whose comm is
// "postgres", divided by the tasks: backends, WAL writer, checkpointer and
// the postmaster, whose cutime/cstime collect the CPU of backends that exit
// during the run. It counts everything the server did, including other
// clients' work on a shared server: run it on a quiet server. When the
// pg_stat_statements extension is installed in the database, its
// total_exec_time growth per task is reported too (time spent executing
// statements, not CPU, and without commit and WAL flush).
//
// # Isolation
//
// Every run uses a fresh namespace on the broker (sybench<hex>) and a fresh
// ledger schema or file, and removes them afterwards (queues, streams, keys
// and schema; best effort, failures are logged).
//
// # Fleet and pruning
//
// Fleet (`switchyard bench fleet`) measures P worker processes sharing one
// ledger draining a pre-filled queue; Prune (`switchyard bench prune`)
// fills a ledger with completed tasks, reports its table sizes, and times
// the ledger's hot path with and without a concurrent Prune. docs/BENCHMARKS.md
// ("Fleet and pruning") describes both methods.
package runtimebench
