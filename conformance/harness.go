package conformance

import (
	"context"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
)

// Harness describes one broker under test. An adapter's test builds one per
// case, each with a namespace of its own so that cases never see each
// other's messages:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) *conformance.Harness {
//			return &conformance.Harness{URL: "mem://?namespace=" + conformance.Namespace(t)}
//		})
//	}
type Harness struct {
	// URL opens the broker under test through broker.Open. Every call of
	// the harness maker must give a URL with a fresh namespace. The crash
	// case opens the same URL in a child process.
	URL string

	// Options are passed to broker.New (nil means defaults). The suite
	// overrides Now, MaxDelay and DefaultMaxAttempts in the cases that need
	// them.
	Options *broker.Options

	// LedgerDSN is the ledger the end-to-end cases use (RunE2E). Every call
	// of the harness maker must give a fresh one. Empty means a new SQLite
	// file in the test's temporary directory.
	LedgerDSN string

	// InjectRaw, when set, puts body on the lane's live queue as the broker
	// would carry a message that Switchyard did not publish (a foreign or
	// corrupt message). The undecodable-message case needs it.
	InjectRaw func(ctx context.Context, lane string, body []byte) error

	// Disrupt, when set, makes the broker unreachable (stops it, closes its
	// connections) and returns a function that brings it back. The outage
	// case needs it.
	Disrupt func(ctx context.Context) (restore func(ctx context.Context) error, err error)

	// InProcess declares that the broker lives inside the test process
	// (mem://), so cases that need it to outlive a killed process are
	// skipped with that reason.
	InProcess bool

	// Cleanup, when set, is called at the end of the case.
	Cleanup func()
}

// HarnessMaker builds a fresh Harness for one case. It calls t.Skip (with
// the reason) only when the environment cannot provide the broker.
type HarnessMaker func(t *testing.T) *Harness
