// Package switchyardtest is the kit for testing code that uses Switchyard:
// unit tests of handlers in process, and the endpoints of real brokers for
// integration tests in CI.
//
// # Handlers in process
//
// New gives a test an Env: the embedded broker in memory, an in-memory
// SQLite ledger, a Client and a Server, all on a fake Clock. Register
// handlers on Env.Server, enqueue with Env.Client, then RunUntilIdle runs
// every task that is due and waits until nothing is ready or running:
//
//	env := switchyardtest.New(t, nil)
//	switchyard.Register(env.Server, handleSummarise, nil)
//	env.Client.Enqueue(ctx, SummariseArgs{DocID: "d1"}, nil)
//	env.RunUntilIdle()
//	switchyardtest.ExpectEnqueued(t, env, NotifyArgs{DocID: "d1"})
//
// Nothing waits for real time to pass. A task enqueued with a delay, or
// retried after a failure, stays delayed until the test moves the clock:
// Env.Advance(d) moves it and runs what became due. Leases expire on the
// same clock, so a test can show what happens when a worker stops
// heartbeating.
//
// FailStepOnce and FailEffectOnce make the next run of a Step or Effect
// fail without calling its function, to test how a handler recovers: the
// retry finds the steps that completed before the failure memoised.
//
// Enqueued, EnqueuedOf and ExpectEnqueued say what was published,
// including the tasks handlers enqueued.
//
// # Brokers in CI
//
// RabbitMQ, Redis, NATS, Postgres, SQS and PubSub return a broker's
// endpoint for an integration test. Each reads its environment variable
// (SWITCHYARD_RABBITMQ_URL, SWITCHYARD_REDIS_ADDR, SWITCHYARD_NATS_URL,
// SWITCHYARD_POSTGRES_DSN, SWITCHYARD_SQS_ENDPOINT,
// SWITCHYARD_PUBSUB_EMULATOR_HOST), as a CI job with service containers
// sets them. Without it, the helper starts a container when the test binary
// links the containers module (a blank import of
// github.com/switchyard-dev/switchyard/switchyardtest/containers, a module
// of its own so that testcontainers-go stays out of the library's
// dependencies); otherwise the test is skipped with the reason, or fails
// when SWITCHYARD_REQUIRE_BROKERS=1.
package switchyardtest
