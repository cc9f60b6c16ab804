package embedded_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/conformance"
)

func TestConformance(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) *conformance.Harness {
			path := filepath.Join(t.TempDir(), "switchyard.db")
			url := "embedded://" + path + "?namespace=" + conformance.Namespace(t)
			return &conformance.Harness{URL: url, InjectRaw: injector(t, url), Cannot: noServer}
		})
	})
	// The same broker without its native ordering, dedup, attempt limit and
	// long delays: every case then passes through the framework's fallbacks.
	t.Run("reduced", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) *conformance.Harness {
			path := filepath.Join(t.TempDir(), "switchyard.db")
			url := "embedded://" + path + "?reduced=true&namespace=" + conformance.Namespace(t)
			return &conformance.Harness{URL: url, InjectRaw: injector(t, url), Cannot: noServer}
		})
	})
	t.Run("mem", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) *conformance.Harness {
			url := "mem://" + conformance.Namespace(t)
			return &conformance.Harness{URL: url, InjectRaw: injector(t, url), InProcess: true, Cannot: noServer}
		})
	})
}

// noServer: the embedded broker is a file (or memory) opened by each
// process; there is no server the outage case could stop.
var noServer = map[conformance.Ability]string{conformance.CanDisrupt: "the embedded broker is a database file opened in each process, with no server to stop"}

// injector writes a corrupt row through a driver of its own.
func injector(t *testing.T, url string) func(ctx context.Context, lane string, body []byte) error {
	return func(ctx context.Context, lane string, body []byte) error {
		d, err := embedded.OpenURL(ctx, url)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.InjectRaw(ctx, lane, body)
	}
}

func TestConformanceE2E(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		conformance.RunE2E(t, func(t *testing.T) *conformance.Harness {
			path := filepath.Join(t.TempDir(), "switchyard.db")
			return &conformance.Harness{URL: "embedded://" + path + "?namespace=" + conformance.Namespace(t)}
		})
	})
	// The same cases with the PostgreSQL ledger are in internal/integration
	// (TestConformanceE2E_EmbeddedPostgresLedger), so that pgx stays out of
	// the go.sum of users of this adapter.
	t.Run("reduced", func(t *testing.T) {
		conformance.RunE2E(t, func(t *testing.T) *conformance.Harness {
			path := filepath.Join(t.TempDir(), "switchyard.db")
			return &conformance.Harness{URL: "embedded://" + path + "?reduced=true&namespace=" + conformance.Namespace(t)}
		})
	})
	t.Run("mem", func(t *testing.T) {
		conformance.RunE2E(t, func(t *testing.T) *conformance.Harness {
			return &conformance.Harness{URL: "mem://" + conformance.Namespace(t), InProcess: true}
		})
	})
}

// TestChaos: 2,000 three-step tasks with one effect each, on worker
// processes SIGKILLed at random at least 50 times (1,000 tasks finished in
// about 9 s on a loaded machine, too soon for 50 kills).
//
//	go test ./adapters/embedded/ -run TestChaos -v
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes about half a minute; -short skips it")
	}
	path := filepath.Join(t.TempDir(), "switchyard.db")
	conformance.TestChaos(t, &conformance.Harness{URL: "embedded://" + path + "?namespace=chaos"}, conformance.ChaosOptions{Tasks: 2000})
}

// TestOrderingFleet: ordering by key across two publisher and three
// consumer processes, 50 keys x 40 tasks, one consumer SIGKILLed mid-run
// (contract point 8), with the ledger and without it.
//
//	go test ./adapters/embedded/ -run TestOrderingFleet -v
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
			path := filepath.Join(t.TempDir(), "switchyard.db")
			conformance.TestOrderingFleet(t, &conformance.Harness{URL: "embedded://" + path + "?namespace=fleet"}, conformance.FleetOptions{NoLedger: noLedger})
		})
	}
}
