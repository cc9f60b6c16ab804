package asynq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	asynqadapter "github.com/switchyard-dev/switchyard/adapters/asynq"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/internal/redisproc"
)

// TestConformance runs the whole suite against the machine's Redis, each
// case in a namespace of its own. The outage case needs a Redis it may stop,
// so its harness gets a private, AOF-persistent redis-server instead, with
// Disrupt stopping and restarting it; the shared Redis is never touched.
func TestConformance(t *testing.T) {
	addr := testenv.Redis.Endpoint(t)
	conformance.Run(t, func(t *testing.T) *conformance.Harness {
		ns := conformance.Namespace(t)
		if strings.HasSuffix(t.Name(), "/Outage") {
			p := redisproc.Start(t, "everysec")
			return &conformance.Harness{
				URL:       p.URL("redis", "namespace="+ns),
				InjectRaw: injector(p.Addr(), ns),
				Disrupt:   p.Disrupt,
			}
		}
		return &conformance.Harness{
			URL:       "redis://" + addr + "/0?namespace=" + ns,
			InjectRaw: injector(addr, ns),
			Cleanup:   func() { cleanupNamespace(addr, ns) },
		}
	})
}

// injector puts body into a lane's queue the way asynq stores a task, as a
// foreign or corrupt task would arrive.
func injector(addr, ns string) func(ctx context.Context, lane string, body []byte) error {
	return func(ctx context.Context, lane string, body []byte) error {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		q := asynqadapter.QueueName(ns, lane)
		id := broker.NewID()
		p := "asynq:{" + q + "}:"
		_, err := c.TxPipelined(ctx, func(pl redis.Pipeliner) error {
			pl.SAdd(ctx, "asynq:queues", q)
			pl.HSet(ctx, p+"t:"+id, "msg", body, "state", "pending", "pending_since", time.Now().UnixNano())
			pl.LPush(ctx, p+"pending", id)
			return nil
		})
		return err
	}
}

// cleanupNamespace deletes what a test left under its namespace.
func cleanupNamespace(addr, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var cursor uint64
	for i := 0; i < 1000; i++ {
		keys, next, err := c.Scan(ctx, cursor, "asynq:{"+ns+":*", 500).Result()
		if err != nil {
			return
		}
		if len(keys) > 0 {
			c.Unlink(ctx, keys...)
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	members, _ := c.SMembers(ctx, "asynq:queues").Result()
	for _, m := range members {
		if len(m) > len(ns) && m[:len(ns)+1] == ns+":" {
			c.SRem(ctx, "asynq:queues", m)
		}
	}
}

// TestConformanceE2E runs the end-to-end suite (broker + ledger + runtime)
// on the machine's Redis, each case in a namespace of its own.
func TestConformanceE2E(t *testing.T) {
	addr := testenv.Redis.Endpoint(t)
	conformance.RunE2E(t, func(t *testing.T) *conformance.Harness {
		ns := conformance.Namespace(t)
		return &conformance.Harness{
			URL:     "redis://" + addr + "/0?namespace=" + ns,
			Cleanup: func() { cleanupNamespace(addr, ns) },
		}
	})
}

// TestChaos: three-step tasks with one effect each on worker processes
// SIGKILLed at random. Redis is fast, so it runs 2,000 tasks to reach the
// suite's 50 kills.
//
//	go test ./adapters/asynq/ -run TestChaos -v
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes about half a minute; -short skips it")
	}
	addr := testenv.Redis.Endpoint(t)
	ns := conformance.Namespace(t)
	t.Cleanup(func() { cleanupNamespace(addr, ns) })
	conformance.TestChaos(t, &conformance.Harness{URL: "redis://" + addr + "/0?namespace=" + ns}, conformance.ChaosOptions{Tasks: 2000})
}

// TestOrderingFleet: ordering by key across two publisher and three
// consumer processes, 50 keys x 40 tasks, one consumer SIGKILLed mid-run
// (contract point 8), with the ledger and without it.
//
//	go test ./adapters/asynq/ -run TestOrderingFleet -v
func TestOrderingFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("the fleet ordering case starts five processes; -short skips it")
	}
	for _, noLedger := range []bool{false, true} {
		name := "ledger"
		if noLedger {
			name = "no-ledger"
		}
		t.Run(name, func(t *testing.T) {
			addr := testenv.Redis.Endpoint(t)
			ns := conformance.Namespace(t)
			t.Cleanup(func() { cleanupNamespace(addr, ns) })
			conformance.TestOrderingFleet(t, &conformance.Harness{URL: "redis://" + addr + "/0?namespace=" + ns}, conformance.FleetOptions{NoLedger: noLedger})
		})
	}
}
