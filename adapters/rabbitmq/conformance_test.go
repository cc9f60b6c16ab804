package rabbitmq

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/conformance"
)

// conformanceLanes are the lanes the suite uses; their queues are deleted
// after each case.
var conformanceLanes = []string{"interactive", "batch", "scheduled", "human-review", "never-used",
	"batch:fair-1", "batch:fair-2", "batch:fair-3"} // the Fairness case's shards

func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) *conformance.Harness {
		ns := conformance.Namespace(t)
		var user, pass string
		outage := strings.HasSuffix(t.Name(), "/Outage")
		if outage {
			// The outage is made for this case's own user, so the cases
			// running in parallel keep their connections.
			user, pass = tempUser(t)
		}
		u := testURL(t, ns, user, pass, nil)
		h := &conformance.Harness{
			URL: u,
			InjectRaw: func(ctx context.Context, lane string, body []byte) error {
				d := openDriver(t, u)
				return d.injectRaw(ctx, lane, body)
			},
			Cleanup: func() { cleanupNamespace(u, conformanceLanes...) },
		}
		if outage {
			h.Disrupt = func(ctx context.Context) (func(context.Context) error, error) {
				if err := rabbitmqctl(ctx, "clear_permissions", "-p", "/", user); err != nil {
					return nil, err
				}
				if err := closeUserConnections(ctx, user); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					return rabbitmqctl(ctx, "set_permissions", "-p", "/", user, ".*", ".*", ".*")
				}, nil
			}
		}
		return h
	})
}

func TestConformanceE2E(t *testing.T) {
	conformance.RunE2E(t, func(t *testing.T) *conformance.Harness {
		u := testURL(t, conformance.Namespace(t), "", "", nil)
		return &conformance.Harness{URL: u, Cleanup: func() { cleanupNamespace(u, conformanceLanes...) }}
	})
}

// TestChaos: 3,000 three-step tasks with one effect each, on worker
// processes SIGKILLed at random at least 50 times (1,000 finish on RabbitMQ
// before 50 kills have happened).
//
//	go test ./adapters/rabbitmq/ -run TestChaos -v
func TestChaos(t *testing.T) {
	if os.Getenv("SWITCHYARD_CONFORMANCE_CHILD") == "chaos" {
		// conformance.TestChaos does not recognise its worker processes
		// itself; Run does (and exits with the worker's status).
		conformance.Run(t, nil)
		return
	}
	if testing.Short() {
		t.Skip("the chaos run takes about a minute; -short skips it")
	}
	u := testURL(t, conformance.Namespace(t), "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, conformanceLanes...) })
	conformance.TestChaos(t, &conformance.Harness{URL: u}, conformance.ChaosOptions{Tasks: 3000, Timeout: 5 * time.Minute})
}

// TestOrderingFleet: ordering by key across two publisher and three
// consumer processes, 50 keys x 40 tasks, one consumer SIGKILLed mid-run
// (contract point 8), with the ledger and without it.
//
//	go test ./adapters/rabbitmq/ -run TestOrderingFleet -v
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
			u := testURL(t, conformance.Namespace(t), "", "", nil)
			t.Cleanup(func() { cleanupNamespace(u, conformanceLanes...) })
			conformance.TestOrderingFleet(t, &conformance.Harness{URL: u}, conformance.FleetOptions{NoLedger: noLedger})
		})
	}
}
