// Package providerbatch is the provider-batch lane: tasks whose model call
// can wait are collected into provider batches (OpenAI's Batch API,
// Anthropic's Message Batches: the same requests at about half the price,
// within 24 hours), submitted, polled durably and settled, and each task
// resumes with its own result.
//
// # The lane
//
// A handler calls Batcher.Do with its job and request. The first run
// records the request and reserves its worst-case spend, then snoozes: the
// task waits as a delayed message, and no process waits for the batch.
// Later runs pump the provider's batches (one pump at a time per process,
// one lease holder across processes): submit pending items by size
// (MaxItems) and age (MaxAge), ordered by cache key; poll submitted batches;
// collect ended ones, settling every item at once. A task whose deadline is
// sooner than Latency calls the provider directly instead.
//
// # Durability
//
// Items, batches and spend live in a Store (providerbatch/sqlstore: the
// ledger's database, migration 0013). The provider's batch ID is recorded
// before any poll, so a worker killed while a batch is in flight loses
// nothing: any worker polls it on. A per-item error puts back only that
// item; an expired or cancelled batch puts back only its unfinished items.
// A submit interrupted between the provider's answer and the record is
// recovered through Finder where the provider supports it (OpenAI).
//
// # Spend
//
// Settled usage becomes money with a spend.Table (integer micro-dollars),
// recorded per task, run, tenant, kind, model, mode and cache key;
// spend.Window caps a tenant's spend per period (refuse or snooze, with the
// reason). Metrics exports Prometheus counters; `switchyard spend` reads the
// ledger.
//
// # Providers
//
// Provider adapters live in their own packages (providerbatch/openai,
// providerbatch/anthropic) so that importing this package pulls no SDK;
// providerbatch/fakeprovider serves both APIs on loopback for tests. See
// docs/PROVIDER-BATCH.md.
package providerbatch
