// Package limits gives handlers the AI-workload controls: rate limits on
// requests and tokens, adaptive throttling after a provider's 429, circuit
// breakers per dependency, per-run budgets and usage accounting. Each
// control decides; the runtime (package scheduler) acts on what the
// handler returns, through Result:
//
//	waiting for capacity, a 429's Retry-After, an open breaker
//	    → scheduler.Snooze(d + jitter): re-delayed, no attempt spent, slot freed
//	a budget crossed → scheduler.Permanent: dead-lettered at once with the budget error
//
// The controls live outside the model's planning loop and are the same on
// every broker: they sit between a handler and the model or tool it calls.
//
// # Rate limits
//
// A Limiter holds Rules. A Rule matches calls by Key (provider, model,
// tenant, workflow kind, tool: any combination; empty fields match all)
// and separates buckets By any of those fields. Each bucket pair limits
// Requests and Tokens per Interval separately, as token buckets (the
// continuous-refill model the providers use) whose capacity is the burst.
//
//	lim, _ := limits.New(limits.Config{Store: limits.NewMemoryStore(nil), Rules: []limits.Rule{{
//		Name: "openai", Match: limits.Key{Provider: "openai"}, By: []limits.Field{limits.Model},
//		Limit: limits.Limit{Requests: 500, Tokens: 200_000, Interval: time.Minute, Reserved: 0.2},
//	}}})
//	res, err := lim.Wait(ctx, limits.Request{Key: key, Tokens: promptTokens + maxTokens, Lane: task.Lane})
//	if err != nil {
//		return limits.Result(err) // snooze until capacity returns
//	}
//	answer, err := model.Call(ctx, …)
//	res.Settle(ctx, answer.Usage.TotalTokens) // refund or debit the difference
//
// Tokens are reserved from an estimate before the call and settled to the
// actual count after: an estimate that was high is refunded, one that was
// low is debited (the level may go below zero, and later calls wait for
// the debt). A call limited by several rules takes from all of them or
// none. Reserved keeps a share of each bucket for Config.PriorityLanes
// (interactive by default): batch callers stop at that floor. Wait sleeps
// in place for short waits (Config.MaxInlineWait) and hands longer ones
// back as a *WaitError, which Result turns into a Snooze — the task does
// not hold a slot while it waits and spends no attempt.
//
// # Stores: in process and shared across processes
//
// MemoryStore serves one process and takes an injected clock. For several
// worker processes sharing one limit, limits/redisstore keeps the same
// buckets in Redis: each operation is one Lua script, atomic on the
// server, reading the server's TIME so that every process shares one
// clock. Redis was chosen over the ledger's PostgreSQL because an acquire
// sits on the hot path of every model call: one round trip to an
// in-memory script (about the cost of a GET) against a transaction with a
// row lock per bucket; bucket state is small and self-expiring (a key
// disappears once its bucket would be full again), so losing it on a
// Redis restart only forgets recent spending. Redis is also a broker this
// project supports (asynq), so it is often there already. Both stores pass
// the same table of cases (limitstest) with an injected clock.
//
// # Adaptive throttling
//
// When a provider answers 429 with Retry-After d anyway (another client
// spends the same quota, or the limit is set too high), the handler
// returns limiter.Throttled(ctx, key, d, err): every bucket of every rule
// matching the key is blocked for d — for every process sharing the
// store — and then refills from empty, so the waiting callers come back
// gradually. The task is snoozed for d plus up to 20% jitter, not retried
// at once. Snooze (not RetryAfter) because a 429 says the provider is
// busy, not that the task failed: spending attempts on it would dead-letter
// good work during a long throttle. The wall clock of a Budget, or the
// task's Deadline, bounds the waiting.
//
// # Circuit breakers
//
// Breakers holds one sony/gobreaker breaker per dependency key. Protect
// runs a call through it; after BreakerConfig.Failures consecutive
// transient failures the breaker opens and calls fail fast with an
// *OpenError (Result: Snooze until the next probe, no attempt spent);
// after BreakerConfig.Open one half-open probe goes through and closes it
// on success. Permanent errors, cancellations and this package's control
// errors do not count as failures. Breakers are per process: each worker
// learns a dependency's health from its own calls, which keeps a broken
// network path of one worker from cutting off the others.
//
// # Budgets and accounting
//
// A Meter opens a Run per attempt (StartJob) on running totals kept in a
// UsageStore by task ID — the same MemoryStore or redisstore.Store — so a
// retry, on this worker or another, spends from the same budget. Budget
// limits the wall clock from the first start, model calls, tool calls,
// tokens and spend. Run.Begin counts a call atomically and refuses one
// whose estimate would cross a limit; Run.End records what it actually
// used and stops the run when the totals cross. A stopped run returns a
// *BudgetError, which Result turns into scheduler.Permanent: the task is
// dead-lettered with reason permanent_error and the error text
// "budget exceeded: max_spend: task … would use … of at most …". (The
// runtime has a dedicated reason, broker.ReasonBudget, but no exported
// handler result for it yet.)
//
// Every recorded call is also an accounting Record (task, key, usage),
// summed by UsageStore.Sum per tenant, model, kind, provider or tool. With
// MeterConfig.Ledger set, each call is appended to the task's event log
// (reason "usage", JSON detail) and a stop as "budget_exceeded", and
// LedgerUsage sums the same figures from the ledger.
//
// # Spend windows per tenant
//
// MeterConfig.Windows caps what each tenant may spend per period (a
// spend.Window: $50 per tenant per UTC day is {Period: 24h, Cap:
// 50_000_000}), through the same Run.Begin / End a budget uses: Begin
// reserves a model call's Spend estimate (rounded up to a micro-dollar) on
// every window of the run's tenant, in MeterConfig.Spend, and refuses the
// call with a *SpendCapError when the tenant's settled and reserved spend
// plus the estimate would exceed a cap; End (or EndSpend, with the
// provider's input / cached / output breakdown) settles the reservation
// to the actual cost. With estimates that are upper bounds, a tenant's
// settled spend never exceeds its cap; with exact ones, work stops within
// one call's estimate of it (an over-estimate leaves the difference of
// every call in flight at the refusal unspent). Result dead-letters a refused task with reason
// budget_exceeded and the window's text, or, for a window with Action
// spend.Snooze, snoozes it until the window resets (no attempt spent); the
// task's event log gets a "spend_cap" event with the same text either way.
// The SpendStore is a MemoryStore in one process or
// providerbatch/sqlstore.Store across processes: the ledger database's
// switchyard_spend rows, shared with the provider-batch lane (one window
// caps both) and reported by the admin API's GET /api/v1/spend and `switchyard
// spend`.
//
// # Fallback routing
//
// Fallback calls routes (models) in order and moves on when one fails
// with a capacity or availability error (rate limited, throttled, breaker
// open, transient), returning which route answered.
//
// # Errors
//
// Control decisions are typed: *WaitError (ErrLimited), *ThrottledError
// (ErrThrottled), *OpenError (ErrOpen), *BudgetError (ErrBudgetExceeded),
// ErrTooLarge for a request that can never fit its bucket. Bad
// configuration is broker.ErrInvalid. Store failures are classified
// broker errors (transient when Redis is unreachable); context errors stay
// recognisable.
//
// # Testing
//
//	go test ./limits/...                       # needs Redis at SWITCHYARD_REDIS_ADDR or 127.0.0.1:6379 for redisstore
//	go test ./limits/redisstore -run MultiProcess -v   # 3 worker processes, 30 s
//	go test ./limits/... -run '^$' -bench .     # acquire overhead
package limits
