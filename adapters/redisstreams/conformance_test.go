package redisstreams

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/internal/redisproc"
)

// TestConformance runs the whole suite against the machine's Redis, each
// case in a namespace of its own. The outage case gets a private,
// AOF-persistent redis-server that Disrupt stops and restarts; the shared
// Redis is never touched.
func TestConformance(t *testing.T) { conformance.Run(t, harness) }

// TestConformanceE2E runs the end-to-end suite (broker + ledger + runtime).
func TestConformanceE2E(t *testing.T) { conformance.RunE2E(t, harness) }

func harness(t *testing.T) *conformance.Harness {
	addr := sharedAddr(t)
	var p *redisproc.Server
	if strings.HasSuffix(t.Name(), "/Outage") {
		p = redisproc.Start(t, "everysec")
		addr = p.Addr()
	}
	rawURL := "redis-streams://" + addr + "/0?namespace=" + conformance.Namespace(t)
	h := &conformance.Harness{
		URL:       rawURL,
		InjectRaw: func(ctx context.Context, lane string, body []byte) error { return injectURL(ctx, rawURL, lane, body) },
		Cleanup:   func() { cleanupURL(rawURL) },
	}
	if p != nil {
		h.Disrupt = p.Disrupt
	}
	return h
}

// TestChaos: 2,000 three-step tasks with one effect each, on worker
// processes SIGKILLed at random at least 50 times, on the shared Redis.
//
//	go test ./adapters/redisstreams/ -run TestChaos -v
func TestChaos(t *testing.T) {
	if os.Getenv("SWITCHYARD_CONFORMANCE_CHILD") != "" {
		// A chaos worker re-executed with -test.run=^TestChaos$ (see the
		// nats adapter's TestChaos).
		conformance.RunCase(t, "Crash", harness)
		return
	}
	if testing.Short() {
		t.Skip("the chaos run takes about a minute; -short skips it")
	}
	rawURL := "redis-streams://" + sharedAddr(t) + "/0?namespace=" + conformance.Namespace(t)
	t.Cleanup(func() { cleanupURL(rawURL) })
	conformance.TestChaos(t, &conformance.Harness{URL: rawURL}, conformance.ChaosOptions{Tasks: 2000, Timeout: 5 * time.Minute})
}

// TestOrderingFleet: ordering by key across two publisher and three
// consumer processes, 50 keys x 40 tasks, one consumer SIGKILLed mid-run
// (contract point 8), with the ledger and without it.
//
//	go test ./adapters/redisstreams/ -run TestOrderingFleet -v
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
			rawURL := "redis-streams://" + sharedAddr(t) + "/0?namespace=" + conformance.Namespace(t)
			t.Cleanup(func() { cleanupURL(rawURL) })
			conformance.TestOrderingFleet(t, &conformance.Harness{URL: rawURL}, conformance.FleetOptions{NoLedger: noLedger})
		})
	}
}
