package nats

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
)

// conformanceLease is the AckWait of the conformance namespaces: the suite
// uses 1–2 s leases and waits on Delivery.LeaseDeadline.
const conformanceLease = "ack_wait=1s"

func TestConformance(t *testing.T) { conformance.Run(t, harness) }

func TestConformanceE2E(t *testing.T) { conformance.RunE2E(t, harness) }

// harness gives each case a fresh namespace on the shared server, or on a
// private server for the case that stops it.
func harness(t *testing.T) *conformance.Harness {
	endpoint := sharedEndpoint(t)
	var srv *privateServer
	if strings.HasSuffix(t.Name(), "/Outage") {
		// The outage case stops and restarts the server: never the shared
		// one.
		srv = startPrivateServer(t)
		endpoint = srv.URL()
	}
	rawURL := strings.TrimSuffix(endpoint, "/") + "/?namespace=" + conformance.Namespace(t) + "&" + conformanceLease
	h := &conformance.Harness{
		URL:       rawURL,
		InjectRaw: func(ctx context.Context, lane string, body []byte) error { return injectURL(ctx, rawURL, lane, body) },
		Cleanup:   func() { cleanupURL(rawURL) },
	}
	if srv != nil {
		h.Disrupt = func(ctx context.Context) (func(context.Context) error, error) {
			srv.Stop()
			return func(context.Context) error { srv.Start(); return nil }, nil
		}
	}
	return h
}

// injectURL publishes raw bytes to the lane's live subject with a plain
// connection, as a foreign publisher would.
func injectURL(ctx context.Context, rawURL, lane string, body []byte) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	cfg, err := parseURL(u)
	if err != nil {
		return err
	}
	nc, err := natsgo.Connect(cfg.server)
	if err != nil {
		return err
	}
	defer nc.Close()
	// A request, so the stream's acknowledgement says it was stored.
	_, err = nc.RequestWithContext(ctx, newNames(cfg.nsToken).liveSubj(lane), body)
	return err
}

// cleanupURL deletes the namespace's streams.
func cleanupURL(rawURL string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return
	}
	cfg, err := parseURL(u)
	if err != nil {
		return
	}
	n := newNames(cfg.nsToken)
	deleteStreams(cfg.server, n.live, n.dlq, n.adv)
}

// TestChaos: 2,000 three-step tasks with one effect each, on worker
// processes SIGKILLed at random at least 50 times, on the shared server
// (1,000 finish here before 50 kills: JetStream is quick).
//
//	go test ./adapters/nats/ -run TestChaos -v
func TestChaos(t *testing.T) {
	if os.Getenv("SWITCHYARD_CONFORMANCE_CHILD") != "" {
		// This process is one of the chaos case's workers, re-executed with
		// -test.run=^TestChaos$. conformance.TestChaos does not dispatch
		// workers itself (RunCase does), and running it here again would
		// make every worker a parent of more workers.
		conformance.RunCase(t, "Crash", harness)
		return
	}
	if testing.Short() {
		t.Skip("the chaos run takes about a minute; -short skips it")
	}
	rawURL := strings.TrimSuffix(sharedEndpoint(t), "/") + "/?namespace=" + conformance.Namespace(t) + "&" + conformanceLease
	t.Cleanup(func() { cleanupURL(rawURL) })
	conformance.TestChaos(t, &conformance.Harness{URL: rawURL}, conformance.ChaosOptions{Tasks: 2000, Timeout: 5 * time.Minute})
}

// TestOrderingFleet: ordering by key across two publisher and three
// consumer processes, 50 keys x 40 tasks, one consumer SIGKILLed mid-run
// (contract point 8), with the ledger and without it.
//
//	go test ./adapters/nats/ -run TestOrderingFleet -v
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
			rawURL := strings.TrimSuffix(sharedEndpoint(t), "/") + "/?namespace=" + conformance.Namespace(t) + "&" + conformanceLease
			t.Cleanup(func() { cleanupURL(rawURL) })
			conformance.TestOrderingFleet(t, &conformance.Harness{URL: rawURL}, conformance.FleetOptions{NoLedger: noLedger})
		})
	}
}

// TestOpen_ConcurrentNewNamespace: processes that open one new namespace
// at once (a fleet starting) all open it. The server can answer the
// losers of the stream-creation race with "subjects overlap with an
// existing stream" rather than "stream name in use"; seen in the fleet
// ordering case, and here with goroutines on connections of their own.
func TestOpen_ConcurrentNewNamespace(t *testing.T) {
	ctx := context.Background()
	for round := range 40 {
		rawURL := strings.TrimSuffix(sharedEndpoint(t), "/") + "/?namespace=" + conformance.Namespace(t) + fmt.Sprintf("r%d", round) + "&" + conformanceLease
		t.Cleanup(func() { cleanupURL(rawURL) })
		const n = 6
		errs := make(chan error, n)
		for range n {
			go func() {
				b, err := broker.Open(ctx, rawURL, nil)
				if err == nil {
					err = b.Close()
				}
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: a concurrent open of a new namespace failed: %v", round, err)
			}
		}
	}
}
