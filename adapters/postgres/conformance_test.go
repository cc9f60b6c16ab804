package postgres

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/internal/faultproxy"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres" // postgres:// ledgers
)

func TestConformance(t *testing.T) { conformance.Run(t, harness) }

// TestConformanceE2E runs the end-to-end cases with the ledger in the same
// database (a schema of its own), as a team with only PostgreSQL runs it.
// (The SQLite ledger is proven with every other adapter.)
func TestConformanceE2E(t *testing.T) {
	conformance.RunE2E(t, func(t *testing.T) *conformance.Harness {
		h := harness(t)
		h.LedgerDSN = pgtest.LedgerDSN(t)
		return h
	})
}

// harness gives each case a fresh schema on the shared server; the outage
// case reaches the server through a proxy it can cut.
func harness(t *testing.T) *conformance.Harness {
	dsn := sharedDSN(t)
	schema := freshSchema(t, dsn)
	h := &conformance.Harness{}
	endpoint := dsn
	if strings.HasSuffix(t.Name(), "/Outage") {
		target, err := testenv.HostPort(dsn)
		if err != nil {
			t.Fatal(err)
		}
		p := faultproxy.New(t, target)
		endpoint = viaProxy(t, dsn, p)
		h.Disrupt = func(ctx context.Context) (func(context.Context) error, error) {
			p.Down()
			return p.Up, nil
		}
	}
	h.URL = withParams(endpoint, "schema="+schema+"&connect_timeout=2")
	rawURL := h.URL
	h.InjectRaw = func(ctx context.Context, lane string, body []byte) error { return injectURL(ctx, rawURL, lane, body) }
	return h
}

// TestChaos: 600 three-step tasks with one effect each, on worker
// processes SIGKILLed at random at least 50 times. At load average 50 on
// two cores a worker finishes about two tasks between kills (573 of 600
// were done after 5 minutes and 310 kills), hence the 8-minute bound; on
// a quiet machine it ends far sooner (not measured here).
//
//	go test ./adapters/postgres/ -run TestChaos -v
func TestChaos(t *testing.T) {
	if os.Getenv("SWITCHYARD_CONFORMANCE_CHILD") != "" {
		// A chaos worker process: conformance.TestChaos does not divert
		// its children itself, RunCase does (and exits).
		conformance.RunCase(t, "Crash", harness)
		return
	}
	if testing.Short() {
		t.Skip("the chaos run takes about a minute; -short skips it")
	}
	// The workers retry up to 1,000 times; so may the broker (its default
	// limit, 25, is reached by tasks killed that often on a loaded machine).
	conformance.TestChaos(t, &conformance.Harness{URL: testURL(t, "default_max_attempts=1000")}, conformance.ChaosOptions{Tasks: 600, Timeout: 8 * time.Minute})
}

// TestOrderingFleet: ordering by key across two publisher and three
// consumer processes, 50 keys x 40 tasks, one consumer SIGKILLed mid-run
// (contract point 8), with the ledger and without it. Ordering is native
// here, so the no-ledger run proves the broker's own.
//
//	go test ./adapters/postgres/ -run TestOrderingFleet -v
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
			conformance.TestOrderingFleet(t, &conformance.Harness{URL: testURL(t, "")}, conformance.FleetOptions{NoLedger: noLedger})
		})
	}
}
