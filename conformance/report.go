package conformance

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
)

// ReportEnv names an environment variable: when set to a file path, Run
// and RunE2E append their capability report to that file as well as
// logging it (go test -v shows it), so CI can keep it as an artifact.
const ReportEnv = "SWITCHYARD_CONFORMANCE_REPORT"

// A report collects, over one Run, what the broker declared and how each
// case ended, and prints which guarantees the broker gives natively, which
// the framework's fallback gave, and which were not shown and why.
type report struct {
	suite string

	mu      sync.Mutex
	caps    *broker.Capabilities
	results map[string]string // case name → passed | failed | skipped: reason
	reasons map[string]string // case name → skip reason
}

func newReport(suite string) *report {
	return &report{suite: suite, results: map[string]string{}, reasons: map[string]string{}}
}

func (r *report) skipped(name, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons[name] = why
}

// observe records the broker's capabilities, once, from the first broker
// a case opens (Open): the report opens no connection of its own.
func (r *report) observe(c broker.Capabilities) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.caps == nil {
		r.caps = &c
	}
}

// track runs the case's bookkeeping: its harness joins the report, and its
// outcome is recorded when it ends.
func (r *report) track(t *testing.T, name string, h *Harness) {
	h.rep, h.caseName = r, name
	t.Cleanup(func() {
		var res string
		switch {
		case t.Failed():
			res = "failed"
		case t.Skipped():
			r.mu.Lock()
			why := r.reasons[name]
			r.mu.Unlock()
			if why == "" {
				why = "see the test log"
			}
			res = "skipped: " + why
		default:
			res = "passed"
		}
		r.mu.Lock()
		r.results[name] = res
		r.mu.Unlock()
	})
}

// row is one line of the report: a guarantee, how the broker provides it,
// and the cases that check it.
type row struct {
	what  string
	how   func(c broker.Capabilities) string
	cases []string
}

func native(ok bool, fallback string) string {
	if ok {
		return "native"
	}
	return "framework fallback (" + fallback + ")"
}

var rows = []row{
	{"delivery, ack, leases", func(broker.Capabilities) string { return "native" },
		[]string{"PublishReceiveAck", "BatchPublish", "Lease", "StaleAck", "Release", "CloseWithoutAck", "ReceiveCancel"}},
	{"lease extension", func(c broker.Capabilities) string { return native(c.LeaseExtension, "re-lease on heartbeat") },
		[]string{"ExtendLease"}},
	{"delays", func(c broker.Capabilities) string {
		if c.MaxDelay == 0 {
			return "native, unlimited"
		}
		return fmt.Sprintf("native up to %v; framework fallback (held by Broker) beyond", c.MaxDelay)
	}, []string{"Delay", "NackDelay", "LongDelayHeld", "LongNackHeld"}},
	{"dead letters with reasons", func(c broker.Capabilities) string {
		return native(c.DeadLetterReasons, "reason, error and history carried by Broker")
	}, []string{"DeadLetter", "NackWithError", "Undecodable", "BadID"}},
	{"attempt limit", func(c broker.Capabilities) string { return native(c.MaxAttempts, "checked by Broker on receive") },
		[]string{"MaxAttempts"}},
	{"deduplication", func(c broker.Capabilities) string {
		if c.Dedup && c.DedupWindow > 0 {
			return fmt.Sprintf("native for %v; framework fallback (Options.Dedup) beyond when set", c.DedupWindow)
		}
		return native(c.Dedup, "Options.Dedup, the ledger's store in production")
	}, []string{"Dedup"}},
	{"ordering by key", func(c broker.Capabilities) string {
		return native(c.Ordering, "Options.Sequencer, the ledger's in production")
	},
		[]string{"Ordering"}},
	{"fair lanes", func(broker.Capabilities) string { return "framework (shard queues)" }, []string{"Fairness"}},
	{"size limit", func(c broker.Capabilities) string {
		if c.MaxMessageSize == 0 {
			return "none declared"
		}
		return fmt.Sprintf("native, %d bytes", c.MaxMessageSize)
	}, []string{"TooLarge"}},
	{"input checks", func(broker.Capabilities) string { return "framework" }, []string{"Invalid", "BadURL"}},
	{"stats and browse", func(c broker.Capabilities) string {
		if c.OldestReadyAge {
			return "native, with the oldest ready age"
		}
		return "native, without the oldest ready age"
	}, []string{"Stats", "Browse"}},
	{"outages", func(broker.Capabilities) string { return "driver reconnects; needs Harness.Disrupt" }, []string{"Outage"}},
	{"crash of a worker", func(broker.Capabilities) string { return "lease expiry; needs a broker outliving the process" }, []string{"Crash"}},
}

// String renders the report: one line per guarantee with how it is
// provided and what its cases showed, then any case not in a row.
func (r *report) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "conformance capability report (%s):\n", r.suite)
	if r.caps == nil {
		fmt.Fprintf(&b, "  (no case opened the broker, so its capabilities are unknown)\n")
	}
	seen := map[string]bool{}
	for _, rw := range rows {
		var outs []string
		for _, c := range rw.cases {
			res, ok := r.results[c]
			if !ok || seen[c] {
				continue
			}
			seen[c] = true
			outs = append(outs, c+" "+res)
		}
		if len(outs) == 0 {
			continue
		}
		how := "unknown"
		if r.caps != nil {
			how = rw.how(*r.caps)
		}
		fmt.Fprintf(&b, "  %-26s %s\n  %-26s   %s\n", rw.what, how, "", strings.Join(outs, "; "))
	}
	var rest []string
	for c, res := range r.results {
		if !seen[c] {
			rest = append(rest, c+" "+res)
		}
	}
	sort.Strings(rest)
	if len(rest) > 0 {
		fmt.Fprintf(&b, "  %-26s %s\n", "other cases", strings.Join(rest, "; "))
	}
	return b.String()
}

// print logs the report on t and appends it to $SWITCHYARD_CONFORMANCE_REPORT.
func (r *report) print(t *testing.T) {
	s := r.String()
	t.Log("\n" + s)
	if path := os.Getenv(ReportEnv); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Errorf("conformance report: %v", err)
			return
		}
		defer f.Close()
		if _, err := fmt.Fprintf(f, "%s: %s\n", t.Name(), s); err != nil {
			t.Errorf("conformance report: %v", err)
		}
	}
}
