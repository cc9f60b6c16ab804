// Package conformance is the suite every broker adapter passes: one set of
// cases that proves the semantic contract (../DESIGN.md, points 1–6, 8, 9,
// 11 and 12) on every broker, through the portable broker.Broker.
//
// # Using it
//
// An adapter's test returns a fresh Harness per case. This one, for the
// in-memory embedded broker, runs as written (doc_test.go runs it):
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) *conformance.Harness {
//			url := "mem://" + conformance.Namespace(t)
//			return &conformance.Harness{
//				URL: url,
//				// Bytes Switchyard did not write, put on a lane's queue with
//				// the broker's own client.
//				InjectRaw: func(ctx context.Context, lane string, body []byte) error {
//					d, err := embedded.OpenURL(ctx, url)
//					if err != nil {
//						return err
//					}
//					defer d.Close()
//					return d.InjectRaw(ctx, lane, body)
//				},
//				// What this harness cannot do, with the reason: those cases
//				// are skipped with it, and the report lists them.
//				Cannot: map[conformance.Ability]string{
//					conformance.CanDisrupt:        "an in-memory broker has no server to stop",
//					conformance.CanOutliveProcess: "an in-memory broker dies with the test process",
//				},
//			}
//		})
//	}
//
// A third-party adapter does the same with its own URL scheme (registered
// with broker.Register), InjectRaw through its broker's client, and
// Disrupt when its test can stop the broker (a proxy in front of it will
// do; see internal/faultproxy).
//
// # The capability report
//
// When the cases have ended, Run logs a report (go test -v shows it; set
// SWITCHYARD_CONFORMANCE_REPORT to a file path to keep it) with one line
// per guarantee: native (the broker does it), framework fallback (the
// broker lacks it, per its Capabilities, and Broker fills the gap), or the
// cases skipped with their reasons.
//
// Cases are exported values in Cases, so an adapter can re-run one with its
// own settings, and a third-party adapter can run the whole suite from its
// own repository.
//
// # What it checks, and how
//
// The suite checks guarantees, not mechanisms: where a broker lacks a
// capability natively, Broker's fallback must give the same result, and the
// same case checks it. It never switches on an adapter's name. Time-based
// assertions are one-sided with generous upper bounds ("not before the
// lease ends", "within five seconds after"), so the suite holds on a loaded
// machine and against brokers whose timing is approximate.
//
// # The crash case
//
// Run re-executes the test binary as a child process that leases one
// message and is then killed with SIGKILL; the parent checks the message
// comes back with a higher attempt number and that nothing else was lost or
// duplicated. The child is recognised by an environment variable, so Run
// must be called from a top-level test (directly or in a subtest).
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Case is one conformance case.
type Case struct {
	Name string
	Test func(t *testing.T, h *Harness)
}

// Cases is the whole suite, in the order Run runs it.
var Cases = []Case{
	{"PublishReceiveAck", TestPublishReceiveAck},
	{"BatchPublish", TestBatchPublish},
	{"Lease", TestLease},
	{"ExtendLease", TestExtendLease},
	{"StaleAck", TestStaleAck},
	{"NackDelay", TestNackDelay},
	{"NackWithError", TestNackWithError},
	{"Release", TestRelease},
	{"CloseWithoutAck", TestCloseWithoutAck},
	{"DeadLetter", TestDeadLetter},
	{"MaxAttempts", TestMaxAttempts},
	{"Dedup", TestDedup},
	{"Ordering", TestOrdering},
	{"Fairness", TestFairness},
	{"Delay", TestDelay},
	{"LongDelayHeld", TestLongDelayHeld},
	{"LongNackHeld", TestLongNackHeld},
	{"TooLarge", TestTooLarge},
	{"Invalid", TestInvalid},
	{"Undecodable", TestUndecodable},
	{"BadID", TestBadID},
	{"Stats", TestStats},
	{"Browse", TestBrowse},
	{"ReceiveCancel", TestReceiveCancel},
	{"Outage", TestOutage},
	{"BadURL", TestBadURL},
	{"Crash", TestCrash},
}

// Run runs every case in parallel subtests, each with a fresh harness.
func Run(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	if maybeChild() {
		return
	}
	runCases(t, "broker cases", Cases, newHarness)
}

// runCases runs cases in parallel subtests, each with a fresh harness, and
// prints the capability report once they have all ended.
func runCases(t *testing.T, suite string, cases []Case, newHarness HarnessMaker) {
	t.Helper()
	rep := newReport(suite)
	t.Cleanup(func() { rep.print(t) }) // after the parallel subtests
	for _, c := range cases {
		c := c
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if h == nil {
				t.Fatal("harness maker returned nil")
			}
			if h.Cleanup != nil {
				t.Cleanup(h.Cleanup)
			}
			rep.track(t, c.Name, h)
			c.Test(t, h)
		})
	}
}

// RunCase runs one case by name with a fresh harness.
func RunCase(t *testing.T, name string, newHarness HarnessMaker) {
	t.Helper()
	if maybeChild() {
		return
	}
	for _, c := range Cases {
		if c.Name == name {
			h := newHarness(t)
			if h.Cleanup != nil {
				t.Cleanup(h.Cleanup)
			}
			c.Test(t, h)
			return
		}
	}
	t.Fatalf("no conformance case %q", name)
}

var unsafeNS = regexp.MustCompile(`[^A-Za-z0-9]+`)

// Namespace returns a namespace unique to this test and run: letters and
// digits from the test's name plus a random suffix, at most 48 characters.
func Namespace(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.ToLower(unsafeNS.ReplaceAllString(t.Name(), ""))
	if len(name) > 36 {
		name = name[len(name)-36:]
	}
	return "t" + name + hex.EncodeToString(b[:])
}

// Open opens the harness's broker with opts (nil: the harness's options)
// and closes it at the end of the test.
func Open(t testing.TB, h *Harness, opts *broker.Options) *broker.Broker {
	t.Helper()
	if opts == nil {
		opts = h.Options
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, h.URL, opts)
	if err != nil {
		t.Fatalf("open %s: %v", redactURL(h.URL), err)
	}
	t.Cleanup(func() { b.Close() })
	if h.rep != nil {
		h.rep.observe(b.Capabilities())
	}
	return b
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return broker.Redact(u)
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newMsg(lane, kind string, body string) *broker.Message {
	return &broker.Message{Lane: lane, Kind: kind, Body: []byte(body)}
}

func publish(t testing.TB, b *broker.Broker, msgs ...*broker.Message) []broker.PublishResult {
	t.Helper()
	rs, err := b.Publish(ctxFor(t, 30*time.Second), msgs...)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("publish message %d: %v", i, r.Err)
		}
	}
	return rs
}

// receiveN receives until it has n deliveries or timeout passes.
func receiveN(t testing.TB, b *broker.Broker, lane string, n int, lease, timeout time.Duration) []*broker.Delivery {
	t.Helper()
	return receiveUntil(t, b, broker.ReceiveRequest{Lane: lane, Max: n, Lease: lease}, n, timeout)
}

func receiveUntil(t testing.TB, b *broker.Broker, req broker.ReceiveRequest, n int, timeout time.Duration) []*broker.Delivery {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out []*broker.Delivery
	for len(out) < n {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		req.Max = n - len(out)
		req.Wait = min(left, time.Second)
		ds, err := b.Receive(ctxFor(t, left+10*time.Second), req)
		if err != nil {
			t.Fatalf("receive from %s (dead=%v): %v", req.Lane, req.DeadLetters, err)
		}
		out = append(out, ds...)
	}
	return out
}

// expectNone fails if anything is delivered from lane within d.
func expectNone(t testing.TB, b *broker.Broker, lane string, d time.Duration, why string) {
	t.Helper()
	ds := receiveUntil(t, b, broker.ReceiveRequest{Lane: lane, Lease: 30 * time.Second}, 1, d)
	if len(ds) > 0 {
		t.Fatalf("%s: got %s (attempt %d) at %s", why, ds[0].ID, ds[0].Attempt, time.Now().Format("15:04:05.000"))
	}
}

// expectNoneBefore fails if anything is delivered from lane before due
// (more than 100 ms before, the slack the cases' own checks of a return
// time allow for clocks read at different points). It receives until
// shortly before due; a receive that returns a message is a failure only
// if it returned that early, since on a loaded machine the
// last receive of the window may return late with a message that became
// due meanwhile. What arrived at or after due is returned, for the caller
// to take as the message's return. Callers take due from before the call
// that set it (a nack's or release's delay counts from when the broker
// handled the call, which is no earlier), so a window that starts only
// after a slow call returns does not fail a broker that kept the delay.
func expectNoneBefore(t testing.TB, b *broker.Broker, lane string, due time.Time, why string) []*broker.Delivery {
	t.Helper()
	ds := receiveUntil(t, b, broker.ReceiveRequest{Lane: lane, Lease: 30 * time.Second}, 1, time.Until(due)-300*time.Millisecond)
	if now := time.Now(); len(ds) > 0 && now.Before(due.Add(-100*time.Millisecond)) {
		t.Fatalf("%s: got %s (attempt %d) at %s, %s before %s", why, ds[0].ID, ds[0].Attempt, now.Format("15:04:05.000"), due.Sub(now), due.Format("15:04:05.000"))
	}
	return ds
}

func ack(t testing.TB, b *broker.Broker, ds ...*broker.Delivery) {
	t.Helper()
	if err := b.Ack(ctxFor(t, 30*time.Second), ds...); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

// eventually polls cond until it returns "" or timeout passes, then fails
// with the last message.
func eventually(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func stats(t testing.TB, b *broker.Broker, lane string) broker.Stats {
	t.Helper()
	s, err := b.Stats(ctxFor(t, 10*time.Second), lane)
	if err != nil {
		t.Fatalf("stats %s: %v", lane, err)
	}
	return s
}

func statsString(s broker.Stats) string {
	return fmt.Sprintf("ready=%d in_flight=%d delayed=%d dead=%d", s.Ready, s.InFlight, s.Delayed, s.DeadLettered)
}

// waitPast sleeps until t (plus a margin for brokers whose clocks tick in
// coarse steps).
func waitPast(deadline time.Time) {
	if d := time.Until(deadline); d > 0 {
		time.Sleep(d)
	}
}
