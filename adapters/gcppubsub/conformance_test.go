package gcppubsub_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/internal/faultproxy"
)

// maker builds a conformance harness on the Pub/Sub fake with a fresh
// namespace whose topics and subscriptions are deleted afterwards. The
// outage case talks to the fake through a TCP proxy whose Disrupt drops
// every connection and refuses new ones: the fake keeps its state, as
// Pub/Sub would. extra are URL parameters ("&ordering=true").
func maker(extra string) conformance.HarnessMaker {
	return func(t *testing.T) *conformance.Harness {
		addr := emulator(t)
		ns := conformance.Namespace(t)
		h := &conformance.Harness{Cleanup: func() { deleteNamespace(addr, ns) }}
		endpoint := addr
		if strings.HasSuffix(t.Name(), "/Outage") {
			p := faultproxy.New(t, addr)
			endpoint = p.Addr
			h.Disrupt = func(ctx context.Context) (func(context.Context) error, error) {
				p.Down()
				return p.Up, nil
			}
		}
		h.URL = testURL(endpoint, ns, extra)
		h.InjectRaw = injectRaw(h.URL)
		return h
	}
}

// notOnPubSub names the conformance cases that cannot pass on Pub/Sub,
// with the reason; they are skipped with it, never silently.
var notOnPubSub = map[string]string{
	"Stats": "the Pub/Sub API has no queue depths (only Cloud Monitoring's subscription/num_undelivered_messages, outside the API): " +
		"the driver's Stats checks the lane's subscriptions answer and reports zero counts (see doc.go, Stats)",
	// The dead-letter case asserts the counts after dead-lettering; the
	// same steps without the counts run in TestDeadLetterNoStats.
	"DeadLetter": "it asserts Stats counts, which the Pub/Sub API does not have (see Stats); TestDeadLetterNoStats runs its steps without them",
}

// runCases runs cases like conformance.Run, skipping those in notOnPubSub
// with their reason.
func runCases(t *testing.T, cases []conformance.Case, mk conformance.HarnessMaker) {
	if os.Getenv("SWITCHYARD_CONFORMANCE_CHILD") != "" {
		// A child process of the crash case: RunCase runs the child's
		// part and exits.
		conformance.RunCase(t, "", nil)
		return
	}
	for _, c := range cases {
		c := c
		t.Run(c.Name, func(t *testing.T) {
			if why, skip := notOnPubSub[c.Name]; skip {
				t.Skip(why)
			}
			t.Parallel()
			h := mk(t)
			if h.Cleanup != nil {
				t.Cleanup(h.Cleanup)
			}
			c.Test(t, h)
		})
	}
}

func TestConformance(t *testing.T) {
	t.Run("unordered", func(t *testing.T) { runCases(t, conformance.Cases, maker("")) })
	t.Run("ordered", func(t *testing.T) { runCases(t, conformance.Cases, maker("&ordering=true")) })
}

func TestConformanceE2E(t *testing.T) {
	if os.Getenv("SWITCHYARD_CONFORMANCE_CHILD") != "" {
		conformance.RunE2E(t, nil)
		return
	}
	t.Run("unordered", func(t *testing.T) { conformance.RunE2E(t, maker("")) })
	t.Run("ordered", func(t *testing.T) { conformance.RunE2E(t, maker("&ordering=true")) })
}

// TestChaos: 500 three-step tasks with one effect each, on worker
// processes SIGKILLed at random at least 50 times (500 rather than 1,000:
// pstest serialises every call under one lock, and each receive is two
// calls, a pull and the lease's ModifyAckDeadline).
//
//	go test ./adapters/gcppubsub/ -run TestChaos -v
func TestChaos(t *testing.T) {
	if os.Getenv("SWITCHYARD_CONFORMANCE_CHILD") != "" {
		conformance.RunCase(t, "", nil)
		return
	}
	if testing.Short() {
		t.Skip("the chaos run takes about a minute; -short skips it")
	}
	h := maker("")(t)
	t.Cleanup(h.Cleanup)
	conformance.TestChaos(t, h, conformance.ChaosOptions{Tasks: 500, Timeout: 5 * time.Minute})
}

// TestOrderingFleet: ordering by key across two publisher and three
// consumer processes, 50 keys x 40 tasks, one consumer SIGKILLed mid-run
// (contract point 8), with the ledger and without it, on native ordering.
//
//	go test ./adapters/gcppubsub/ -run TestOrderingFleet -v
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
			h := maker("&ordering=true")(t)
			t.Cleanup(h.Cleanup)
			conformance.TestOrderingFleet(t, h, conformance.FleetOptions{NoLedger: noLedger})
		})
	}
}
