// Package redisstore keeps limits' token buckets, run totals and usage
// aggregates in Redis, so that several worker processes share one limit
// and one budget per task.
//
// # Usage
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, _ := redisstore.New(rdb, &redisstore.Options{Prefix: "myapp:limits:"})
//	lim, _ := limits.New(limits.Config{Store: store, Rules: rules})
//	meter, _ := limits.NewMeter(limits.MeterConfig{Store: store})
//
// # Semantics
//
// Every bucket operation (take several buckets all-or-nothing, refund or
// debit, block after a 429, read the level) is one Lua script, atomic on
// the server. The scripts read the server's TIME (microseconds), so
// workers with skewed clocks still share one timeline; Options.Now
// replaces it in tests. A bucket's key expires once the bucket would be
// full again, so idle keys cost nothing. Run totals (hash per task) expire
// Options.RunTTL after their last change; usage aggregates are kept until
// deleted. In Redis Cluster, give the prefix a hash tag so the buckets of
// one call share a slot.
//
// # Errors
//
// Redis failures are broker errors of class transient ("redisstore: take:
// …"); context errors are returned as they are.
//
// # Testing
//
// Tests use testenv.Redis (SWITCHYARD_REDIS_ADDR, default 127.0.0.1:6379)
// with a prefix unique to each test, deleted at the end. They run the
// shared limitstest table, a server-clock test, and the 30 s multi-process
// test (3 re-executed worker processes against a fake provider).
package redisstore
