// Package lanes defines Switchyard's lanes and the policy that decides
// which lane the next free worker slot pulls a task for. It is pure and
// deterministic: no I/O, no goroutines, no clock reads (the time is a
// parameter), so the scheduler calls it and tests simulate it on simulated
// time.
//
// # Lanes
//
// A Lane has a name, a number of Reserved slots only it may use, a Weight,
// a PromotionAge, a WaitObjective, a MinShare and a Manual flag (every field
// is documented on Lane with its default). Defaults returns the four
// default lanes:
//
//	lane          reserved  weight  promotion  objective  min share
//	interactive   2         100     500 ms     100 ms     –
//	scheduled     1         10      5 s        1 s        –
//	batch         –         1       2 s        –          2 %
//	human-review  manual (claimed by reviewers, never by handlers; escalates after 24 h)
//
// A Policy over N slots gives each lane its reservation; the rest, N minus
// the sum of reservations, is shared. A task may cost more than one slot
// (LaneState.Cost). Validate (and NewPolicy) refuse unknown shapes with a
// *ConfigError that matches ErrInvalid (broker.ErrInvalid is the same
// error, so either matches): bad or duplicate names, negative values,
// reservations above N, a lane without reservation when every slot is
// reserved, a manual lane with a reservation, minimum shares above 1 in
// sum or beyond what a lane can hold.
//
// # Choosing a lane
//
// The scheduler calls Policy.Next(now, states) whenever a slot frees up,
// work arrives or a lane is resumed, with one LaneState per lane (slots
// Running, Waiting, OldestReady, Paused, the next task's Cost and the
// lane's observed P90 task duration). Next returns a lane to pull one task
// for, or ok=false; the scheduler starts the task and calls again until
// ok=false. Next never returns a manual, paused or idle lane, nor a task
// that needs more slots than are free. Otherwise it ranks the lanes with
// waiting work:
//
//  1. Reserved: the lane's next task fits in its own idle reserved slots.
//  2. Promoted: the lane's work has waited PromotionAge or longer. Its age
//     counts from its oldest ready task or from the last time Next chose
//     the lane, whichever is later; so a backlog enqueued long ago does
//     not keep a lane promoted forever: promotion guarantees a start per
//     PromotionAge, not all the slots. Earliest deadline (start of the
//     age + PromotionAge) first.
//  3. Below share: the lane's time-averaged share of all slots (an
//     exponential average over ShareWindow, unbiased at start-up) is below
//     its MinShare, and it holds fewer than ⌈MinShare × N⌉ slots now.
//     Most deficient first.
//  4. By weight: effective priority Weight × (1 + age / PromotionAge),
//     highest first.
//
// Ties go to the lane defined first. The first lane in that order whose
// task fits wins. A promoted lane whose task does not fit yet (it needs
// more slots than are free) holds the shared slots: Next returns ok=false
// until enough have freed, so a costly task is not overtaken forever by
// cheap ones. Lanes of rank 1 need no shared slot and always come first,
// so a hold never costs a reservation.
//
// # Lending idle reserved slots
//
// Reserved slots that sit idle are the price of a reservation (river's
// per-queue limits cap the batch this way). Policy lends them, safely: when
// every shared slot is in use, a lane whose observed p90 task duration
// (LaneState.P90, measured by the scheduler; zero means unknown and never
// borrows) is at most BorrowFraction (½) × a lender's WaitObjective may use
// the lender's idle reserved slots, provided the lender has nothing waiting
// and all but one of its reserved slots: a lender always keeps one
// reserved slot idle. So a lone task of the lender still starts at once,
// and a task that arrives while its other reserved slots are lent waits
// for one borrowed task, at most half its objective in the p90 case. A
// lane with one reserved slot never lends. In the simulated S1 (20 ms
// batch tasks, interactive 20/s of 20 ms) lending raised the batch from
// 9,000 to 9,901 starts in 30 s with no change to interactive waits
// (steady arrivals); with Poisson arrivals, interactive p99 6.83 ms against
// 6.77 ms without lending, the longest wait for a lent slot 9.9 ms, and the
// whole 10,000-task backlog done within the 30 s (1,005 left without). In
// S2 (1 s batch tasks) nothing is lent: 1 s is long against 100 ms.
//
// # Fairness within a lane
//
// Fair is a queue, FIFO within a fairness key (a tenant) and weighted
// round-robin across keys, for a lane's ready tasks: one tenant's flood of
// any length delays another tenant's item by at most ⌈(a+1)/w⌉ × W items,
// where a is the number of that tenant's own items ahead of it, w its
// weight and W the other keys' weights in sum.
//
// The runtime makes lanes fair where the backlog is, in the broker: a fair
// lane (broker.Options.Fair) is split into shard queues by tenant and
// receives take from the non-empty shards in turn, on every adapter. Fair
// is the in-memory form of the same discipline, for callers that hold a
// lane's backlog themselves (and the policy's simulations).
//
// # Invariants and why they hold
//
// Reservations are honoured. No lane holds another lane's reserved slot
// except a borrower under the lending rule: a lane beyond its reservation
// takes only shared slots (need ≤ free shared), and a borrower only the
// lendable ones. So with no lending, the free slots always include every
// lane's idle reserved slots, and a lane whose next task fits in them is
// ranked first and started in the same call. With lending, the wait is at
// most one borrowed task, and a lender always has one slot left for a lone
// task. The simulation property tests check both on every event.
//
// No lane starves. Take a lane with work waiting continuously and tasks of
// one slot; let L be the number of handler lanes, S the shared slots and D
// the longest task duration. At most PromotionAge after its last start (or
// its oldest task's arrival) the lane is promoted, with deadline T. From
// then on no lane ranked below it takes a shared slot (it ranks above them
// and, if it does not fit, holds), and a lane ranked above it is either
// rank 1 (which uses its own reserved slots only) or promoted with an
// earlier deadline; such a lane, once served, has a new deadline after T,
// so each of the other L−1 lanes goes ahead at most once. Every task
// holding a shared (or borrowed) slot at T ends by T + D, and each task
// started after T by a lane ahead ends within D of its start; so within
// ⌈L/S⌉ × D the lane has its slot. The bound is PromotionAge + ⌈L/S⌉ × D,
// that is PromotionAge + one task duration for the defaults on 8 slots
// (L = 3, S = 5). With tasks of up to c slots, ⌊S/c⌋ of them (at least
// one) run side by side, and the bound is PromotionAge + ⌈L / max(1,
// ⌊S/c⌋)⌉ × D. Both bounds are checked by property tests.
//
// Minimum shares are kept under overload. While a lane with work waiting
// is below its MinShare it outranks every lane competing by weight, so it
// takes shared slots until its averaged share reaches MinShare (the cap of
// ⌈MinShare × N⌉ concurrent slots keeps a burst at start-up from
// overshooting). Validate refuses a MinShare beyond what the lane can hold.
// A property test checks share ≥ MinShare − 10 % (and ≥ 0.9 × MinShare)
// over random overloads; in the simulated S3 the batch keeps its share
// exactly.
//
// Interactive is never delayed beyond what its reservation carries: an
// interactive task that fits in the lane's idle reserved slots starts in
// the call that sees it (invariant 1). Past its reservation it competes for
// shared slots with weight 100, so it waits only for a slot to free, or
// for a promoted or below-share lane to take its one slot.
//
// Decisions are deterministic: they depend only on the lanes and the
// sequence of Next calls. The policy remembers, per lane, when it last
// chose it, when it saw it start waiting, and its averaged slot use.
//
// # Simulated figures (S1–S4)
//
// TestSim_Scenarios and TestSim_S4Tenants run the lanes benchmark
// as a discrete-event simulation on simulated time (8 slots, interactive 2
// reserved, scheduled none; waits are enqueue → start with no fetch
// latency, so idle baselines are 0 where a slot is free). Print them with
//
//	go test ./lanes/ -run Sim -v
//
// The real runtime's figures come from the benchmark in the scheduler.
//
// # Testing
//
//	go test -race ./lanes/
//	go test ./lanes/ -run Property -rapid.checks=2000   # longer property runs
package lanes
