package conformance

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
)

// Harness describes one broker under test. An adapter's test builds one per
// case, each with a namespace of its own so that cases never see each
// other's messages (see the package documentation for a whole example).
//
// A harness that cannot do something a case needs (make its broker
// unreachable, inject foreign bytes, keep the broker alive across a killed
// process) says so in Cannot, with the reason: the case is then skipped
// with that reason and the capability report shows it.
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
	// skipped with that reason. It is Cannot[CanOutliveProcess] with a
	// reason written for you.
	InProcess bool

	// Cannot declares what this harness cannot do, each with the reason a
	// reader of the test output needs ("the emulator has no way to stop
	// it"). The cases that need an ability the harness lacks are skipped
	// with that reason. A case whose ability is neither provided nor
	// declared fails (CanInjectRaw) or is skipped naming the missing
	// declaration (CanDisrupt).
	Cannot map[Ability]string

	// rep and caseName are set by Run: the report a skip is recorded in.
	rep      *report
	caseName string

	// Cleanup, when set, is called at the end of the case.
	Cleanup func()
}

// HarnessMaker builds a fresh Harness for one case. It calls t.Skip (with
// the reason) only when the environment cannot provide the broker.
type HarnessMaker func(t *testing.T) *Harness

// Ability is something a case needs from the harness rather than from the
// broker.
type Ability string

// The abilities a harness may lack.
const (
	// CanInjectRaw: Harness.InjectRaw puts bytes Switchyard did not write
	// on a queue (cases Undecodable and BadID).
	CanInjectRaw Ability = "inject-raw"
	// CanDisrupt: Harness.Disrupt makes the broker unreachable and back
	// (case Outage).
	CanDisrupt Ability = "disrupt"
	// CanOutliveProcess: the broker outlives a killed test process and is
	// shared by several (cases Crash, the end-to-end crash, Chaos, Fleet).
	// Harness.InProcess declares its lack.
	CanOutliveProcess Ability = "outlive-process"
)

var abilityText = map[Ability]string{
	CanInjectRaw:      "inject bytes Switchyard did not write",
	CanDisrupt:        "make the broker unreachable",
	CanOutliveProcess: "keep the broker alive across a killed process",
}

// cannot returns the declared reason the harness lacks a, if it does.
func (h *Harness) cannot(a Ability) (string, bool) {
	if why, ok := h.Cannot[a]; ok {
		if why == "" {
			why = "no reason given"
		}
		return why, true
	}
	if a == CanOutliveProcess && h.InProcess {
		return "the broker lives inside the test process (Harness.InProcess): a killed process takes it along, and no other process can share it", true
	}
	return "", false
}

// require skips t, with the harness's declared reason, when the harness
// declares it cannot do a.
func (h *Harness) require(t *testing.T, a Ability) {
	t.Helper()
	if why, ok := h.cannot(a); ok {
		h.skipf(t, "the harness declares it cannot %s (%s): %s", abilityText[a], a, why)
	}
}

// skipf skips t and records the reason for the capability report.
func (h *Harness) skipf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if h.rep != nil {
		h.rep.skipped(h.caseName, msg)
	}
	t.Skip(msg)
}
