package migrate_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/switchyard-dev/switchyard/adapters/all" // every broker URL scheme
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/internal/testclean"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/migrate"
)

// Environment of the child process the interrupted-run test kills.
const (
	childEnv = "SWITCHYARD_MIGRATE_CHILD"
	fromEnv  = "SWITCHYARD_MIGRATE_FROM"
	toEnv    = "SWITCHYARD_MIGRATE_TO"
	jourEnv  = "SWITCHYARD_MIGRATE_JOURNAL"
	batchEnv = "SWITCHYARD_MIGRATE_BATCH"
	leaseEnv = "SWITCHYARD_MIGRATE_LEASE"
	// ledgerEnv: the DSN of the ledger whose sequencer numbered the
	// source's keyed messages (migrate.Options.SourceSequencer).
	ledgerEnv = "SWITCHYARD_MIGRATE_LEDGER"
)

func TestMain(m *testing.M) {
	// The SQS emulator takes any credentials; never look for real ones.
	testenv.EmulatorAWSCredentials()
	if os.Getenv(childEnv) == "1" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// child migrates slowly (small batches: SWITCHYARD_MIGRATE_BATCH, default
// 5; leases of SWITCHYARD_MIGRATE_LEASE, default 3s), printing its
// progress, until it is killed. It starts no process.
func child() int {
	ctx := context.Background()
	// Run on opened brokers, not RunURL: the same-kind pairs use two
	// namespaces of one server to stand for two clusters.
	from, err := broker.Open(ctx, os.Getenv(fromEnv), &broker.Options{Sequencer: testSeq})
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		return 2
	}
	to, err := broker.Open(ctx, os.Getenv(toEnv), &broker.Options{Sequencer: testSeq})
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		return 2
	}
	batch, _ := strconv.Atoi(os.Getenv(batchEnv))
	if batch <= 0 {
		batch = 5
	}
	lease, _ := time.ParseDuration(os.Getenv(leaseEnv))
	if lease <= 0 {
		lease = 3 * time.Second
	}
	var sourceSeq broker.Sequencer
	if dsn := os.Getenv(ledgerEnv); dsn != "" {
		L, err := ledger.Open(ctx, dsn)
		if err != nil {
			fmt.Printf("ERROR %v\n", err)
			return 2
		}
		defer L.Close()
		sourceSeq = ledger.SequencerOf(L)
	}
	_, err = migrate.Run(ctx, from, to, &migrate.Options{
		SourceSequencer:    sourceSeq,
		Journal:            os.Getenv(jourEnv),
		Lanes:              []string{"batch"},
		IncludeDeadLetters: true,
		Batch:              batch,
		Lease:              lease,
		Progress: func(p migrate.Progress) {
			fmt.Printf("PROGRESS %d\n", p.Moved+p.Skipped)
			os.Stdout.Sync()
			time.Sleep(2 * time.Millisecond)
		},
	})
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		return 2
	}
	fmt.Println("DONE")
	return 0
}

var unsafe = regexp.MustCompile(`[^a-z0-9]+`)

func namespace(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := unsafe.ReplaceAllString(strings.ToLower(t.Name()), "")
	if len(name) > 24 {
		name = name[len(name)-24:]
	}
	return "m" + name + hex.EncodeToString(b[:])
}

// urlFor returns a URL of the named adapter for namespace ns, or skips with
// the reason the broker is unavailable.
func urlFor(t *testing.T, kind, ns string) string {
	t.Helper()
	var extra url.Values
	if kind == "nats" {
		// A short AckWait, so messages leased by a killed run come back
		// within the test (the driver keeps longer leases alive itself).
		extra = url.Values{"ack_wait": {"5s"}}
	}
	return testclean.URL(t, kind, ns, extra)
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testSeq orders keyed messages for every Broker this test process opens
// (one process publishes and consumes, so an in-process sequencer is
// exact; a fleet shares the ledger's).
var testSeq = broker.NewMemorySequencer()

func open(t *testing.T, rawURL string) *broker.Broker {
	t.Helper()
	b, err := broker.Open(ctxFor(t, 30*time.Second), rawURL, &broker.Options{Sequencer: testSeq})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// want is what a seeded message must look like on the target.
type want struct {
	msg  broker.Message
	dead *broker.DeadLetter
}

// seed puts n messages on lane: mostly ready, every tenth delayed by two
// seconds, and (with dead) every seventh dead-lettered with a history. All
// carry tenant, headers, ordering and idempotency keys.
func seed(t *testing.T, b *broker.Broker, lane string, n int, dead bool) map[string]*want {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	out := map[string]*want{}
	var msgs []*broker.Message
	runAt := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	for i := 0; i < n; i++ {
		m := &broker.Message{
			ID:             broker.NewID(),
			Lane:           lane,
			Kind:           "migrate.test",
			Body:           []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Headers:        map[string]string{"trace": "t-" + strconv.Itoa(i)},
			IdempotencyKey: fmt.Sprintf("idem-%d", i),
			OrderingKey:    fmt.Sprintf("order-%d", i%40),
			Tenant:         fmt.Sprintf("tenant-%d", i%3),
			MaxAttempts:    5,
		}
		if i%10 == 3 {
			m.RunAt = runAt
		}
		if dead && i%7 == 5 && m.RunAt.IsZero() {
			// To be dead-lettered: no ordering key, so that it can be
			// leased while the heads of the ordering keys wait.
			m.OrderingKey = ""
		}
		msgs = append(msgs, m)
		out[m.ID] = &want{msg: *m}
	}
	for start := 0; start < len(msgs); start += 100 {
		rs, err := b.Publish(ctx, msgs[start:min(start+100, len(msgs))]...)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Err != nil || r.Duplicate {
				t.Fatalf("seed publish: %+v", r)
			}
		}
	}
	for _, m := range msgs {
		out[m.ID].msg.EnqueuedAt = m.EnqueuedAt
	}
	if !dead {
		return out
	}
	// Dead-letter every seventh ready message.
	toKill := map[string]bool{}
	for i, m := range msgs {
		if i%7 == 5 && m.RunAt.IsZero() {
			toKill[m.ID] = true
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(toKill) > 0 && time.Now().Before(deadline) {
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 50, Lease: time.Minute, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if !toKill[d.ID] {
				if err := b.Release(ctx, d, 0); err != nil {
					t.Fatal(err)
				}
				continue
			}
			dl := &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "bad input " + d.ID[:8], At: time.Now().Truncate(time.Millisecond),
				Attempts: []broker.AttemptRecord{{Attempt: 1, Start: time.Now().Add(-time.Second).Truncate(time.Millisecond), Duration: 250 * time.Millisecond, Class: "permanent", Error: "bad input", Worker: "w1"}}}
			if err := b.DeadLetter(ctx, d, dl); err != nil {
				t.Fatal(err)
			}
			out[d.ID].dead = dl
			delete(toKill, d.ID)
		}
	}
	if len(toKill) > 0 {
		t.Fatalf("seed: %d messages to dead-letter never came", len(toKill))
	}
	return out
}

// drain receives every live message and dead letter of lane and acks
// them, returning the deliveries.
func drain(t *testing.T, b *broker.Broker, lane string, dead bool, expect int) []*broker.Delivery {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	var out []*broker.Delivery
	empties := 0
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 100, Lease: time.Minute, Wait: time.Second, DeadLetters: dead})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			empties++
			if len(out) >= expect && empties >= 2 {
				break
			}
			continue
		}
		empties = 0
		out = append(out, ds...)
		if err := b.Ack(ctx, ds...); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// verify checks that the target holds every seeded message exactly once
// (live ones live, dead ones dead with their details), except that IDs in
// doubt may appear twice, and that the source is empty.
func verify(t *testing.T, src, dst *broker.Broker, lane string, ws map[string]*want, inDoubt []string) {
	t.Helper()
	doubt := map[string]bool{}
	for _, id := range inDoubt {
		doubt[id] = true
	}
	nDead := 0
	for _, w := range ws {
		if w.dead != nil {
			nDead++
		}
	}
	check := func(ds []*broker.Delivery, dead bool) {
		seen := map[string]int{}
		for _, d := range ds {
			seen[d.ID]++
			w, ok := ws[d.ID]
			if !ok {
				t.Errorf("unknown message %s on the target", d.ID)
				continue
			}
			if (w.dead != nil) != dead {
				t.Errorf("message %s: dead-lettered %v on the target, want %v", d.ID, dead, w.dead != nil)
				continue
			}
			m := w.msg
			if d.Kind != m.Kind || string(d.Body) != string(m.Body) || d.IdempotencyKey != m.IdempotencyKey || d.OrderingKey != m.OrderingKey ||
				d.Tenant != m.Tenant || d.MaxAttempts != m.MaxAttempts || d.Headers["trace"] != m.Headers["trace"] || len(d.Headers) != 1 {
				t.Errorf("message %s changed:\n got %+v\nwant %+v", d.ID, d.Message, m)
			}
			if !d.EnqueuedAt.Truncate(time.Millisecond).Equal(m.EnqueuedAt.Truncate(time.Millisecond)) {
				t.Errorf("message %s enqueued at %v, want %v", d.ID, d.EnqueuedAt, m.EnqueuedAt)
			}
			if !dead && !m.RunAt.IsZero() && !d.RunAt.Truncate(time.Millisecond).Equal(m.RunAt) {
				t.Errorf("message %s run at %v, want %v", d.ID, d.RunAt, m.RunAt)
			}
			if dead {
				if d.DeadLetter == nil || d.DeadLetter.Reason != w.dead.Reason || d.DeadLetter.Error != w.dead.Error ||
					len(d.DeadLetter.Attempts) != 1 || d.DeadLetter.Attempts[0].Worker != "w1" || d.DeadLetter.Attempts[0].Error != "bad input" {
					t.Errorf("dead letter %s lost its details: %+v", d.ID, d.DeadLetter)
				}
			}
		}
		for id, n := range seen {
			if n > 1 && !doubt[id] {
				t.Errorf("message %s is on the target %d times", id, n)
			}
		}
		for id, w := range ws {
			if (w.dead != nil) == dead && seen[id] == 0 {
				t.Errorf("message %s (dead %v) is missing on the target", id, dead)
			}
		}
	}
	t0 := time.Now()
	check(drain(t, dst, lane, false, len(ws)-nDead), false)
	t1 := time.Now()
	check(drain(t, dst, lane, true, nDead), true)
	t.Logf("drain live %v dead %v", t1.Sub(t0), time.Since(t1))
	s, err := src.Stats(ctxFor(t, 30*time.Second), lane)
	if err != nil {
		t.Fatal(err)
	}
	if s.Ready+s.InFlight+s.Delayed+s.DeadLettered != 0 {
		t.Errorf("source not empty: %+v", s)
	}
}

// pair migrates n seeded messages from one adapter to another in one run.
func pair(t *testing.T, fromKind, toKind string, n int) {
	ns := namespace(t)
	fromURL, toURL := urlFor(t, fromKind, ns), urlFor(t, toKind, ns)
	if fromKind == toKind && fromKind != "embedded" {
		// One server of each kind here: two namespaces on it stand for two
		// clusters (Run takes brokers; the URL namespace check is RunURL's).
		toURL = urlFor(t, toKind, ns+"b")
	}
	src := open(t, fromURL)
	dst := open(t, toURL)
	t0 := time.Now()
	ws := seed(t, src, "batch", n, true)
	t1 := time.Now()
	var progress int
	journal := filepath.Join(t.TempDir(), "journal")
	rep, err := migrate.Run(ctxFor(t, 2*time.Minute), src, dst, &migrate.Options{
		Lanes: []string{"batch"}, IncludeDeadLetters: true, Wait: 15 * time.Second,
		Journal:  journal,
		Progress: func(migrate.Progress) { progress++ },
	})
	if err != nil {
		t.Fatalf("migrate: %v (report %+v)", err, rep)
	}
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a run that ended without error must remove its journal: %v", err)
	}
	if rep.Moved != n || rep.Skipped != 0 || len(rep.Failures) != 0 || progress == 0 {
		t.Fatalf("report: moved %d skipped %d failures %v progress %d, want %d moved", rep.Moved, rep.Skipped, rep.Failures, progress, n)
	}
	t2 := time.Now()
	verify(t, src, dst, "batch", ws, nil)
	t.Logf("seed %v, migrate %v, verify %v", t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond))
}

func TestEmbeddedToEmbedded(t *testing.T) {
	t.Parallel()
	pair(t, "embedded", "embedded", 300)
}

// TestOneRun: a run that is not interrupted moves everything and says so.
func TestOneRun(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{{"embedded", "rabbitmq"}, {"nats", "embedded"}} {
		t.Run(c[0]+"-to-"+c[1], func(t *testing.T) { pair(t, c[0], c[1], 200) })
	}
}

func TestDryRun(t *testing.T) {
	ns := namespace(t)
	src, dst := open(t, urlFor(t, "embedded", ns)), open(t, urlFor(t, "embedded", ns))
	ws := seed(t, src, "batch", 40, true)
	nDead := int64(0)
	for _, w := range ws {
		if w.dead != nil {
			nDead++
		}
	}
	rep, err := migrate.Run(ctxFor(t, time.Minute), src, dst, &migrate.Options{DryRun: true, IncludeDeadLetters: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.DryRun || len(rep.Lanes) != 1 || rep.Lanes[0].Lane != "batch" || rep.Moved != 0 {
		t.Fatalf("report %+v", rep)
	}
	l := rep.Lanes[0]
	if l.Before.Delayed != 4 || l.Before.DeadLettered != nDead || l.Before.Ready != 36-nDead || l.WouldMove != l.Before.Ready+nDead {
		t.Fatalf("dry run lane %+v", l)
	}
	if s, _ := src.Stats(ctxFor(t, time.Minute), "batch"); s.Ready != l.Before.Ready || s.Delayed != l.Before.Delayed || s.InFlight != 0 || s.DeadLettered != l.Before.DeadLettered {
		t.Fatalf("dry run changed the source: %+v -> %+v", l.Before, s)
	}
	if s, _ := dst.Stats(ctxFor(t, time.Minute), "batch"); s.Ready+s.Delayed+s.DeadLettered != 0 {
		t.Fatalf("dry run wrote to the target: %+v", s)
	}
}

// TestDelayedLeftBehind: without Options.Wait, messages not yet due stay on
// the source and the report says so.
func TestDelayedLeftBehind(t *testing.T) {
	ns := namespace(t)
	src, dst := open(t, urlFor(t, "embedded", ns)), open(t, urlFor(t, "embedded", ns))
	ctx := ctxFor(t, time.Minute)
	if _, err := src.PublishOne(ctx, &broker.Message{Lane: "scheduled", Kind: "k", RunAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.PublishOne(ctx, &broker.Message{Lane: "scheduled", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	rep, err := migrate.Run(ctx, src, dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Moved != 1 || rep.Lanes[0].LeftDelayed != 1 {
		t.Fatalf("report %+v", rep.Lanes)
	}
}

func TestBadInput(t *testing.T) {
	ns := namespace(t)
	fromURL := urlFor(t, "embedded", ns)
	src := open(t, fromURL)
	seed(t, src, "batch", 20, false)
	before, _ := src.Stats(ctxFor(t, time.Minute), "batch")
	unchanged := func(t *testing.T) {
		t.Helper()
		s, err := src.Stats(ctxFor(t, time.Minute), "batch")
		if err != nil {
			t.Fatal(err)
		}
		if s.Ready+s.Delayed+s.InFlight != before.Ready+before.Delayed+before.InFlight {
			t.Fatalf("source changed: %+v -> %+v", before, s)
		}
	}

	t.Run("unreachable target", func(t *testing.T) {
		// A port nothing listens on: the target's Stats fails before the
		// source is touched.
		for _, to := range []string{
			"redis://127.0.0.1:1/0?namespace=" + ns,
			"sqs://?region=us-east-1&endpoint=" + url.QueryEscape("http://127.0.0.1:1") + "&namespace=" + ns,
		} {
			_, err := migrate.RunURL(ctxFor(t, time.Minute), fromURL, to, nil, &migrate.Options{Lanes: []string{"batch"}})
			if err == nil || !strings.Contains(err.Error(), "target unreachable") {
				t.Fatalf("err = %v, want target unreachable", err)
			}
			unchanged(t)
		}
	})
	t.Run("mismatched namespaces", func(t *testing.T) {
		other := urlFor(t, "embedded", ns+"x")
		_, err := migrate.RunURL(ctxFor(t, time.Minute), fromURL, other, nil, nil)
		if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "mismatched namespaces") {
			t.Fatalf("err = %v", err)
		}
		noNS := "embedded://" + filepath.Join(t.TempDir(), "q.db")
		if err := migrate.CheckURLs(fromURL, noNS); !errors.Is(err, broker.ErrInvalid) {
			t.Fatalf("implicit namespace: %v", err)
		}
		unchanged(t)
	})
	t.Run("same broker", func(t *testing.T) {
		if _, err := migrate.RunURL(ctxFor(t, time.Minute), fromURL, fromURL, nil, nil); !errors.Is(err, broker.ErrInvalid) {
			t.Fatalf("err = %v", err)
		}
		if _, err := migrate.Run(ctxFor(t, time.Minute), src, src, nil); !errors.Is(err, broker.ErrInvalid) {
			t.Fatalf("err = %v", err)
		}
		unchanged(t)
	})
	t.Run("too large for the target", func(t *testing.T) {
		// Another lane with one message too big for a target with a 300
		// byte limit (SQS has the same kind of limit at 256 KiB).
		ctx := ctxFor(t, time.Minute)
		big := &broker.Message{Lane: "big", Kind: "k", Body: make([]byte, 400)}
		if _, err := src.PublishOne(ctx, big); err != nil {
			t.Fatal(err)
		}
		if _, err := src.PublishOne(ctx, &broker.Message{Lane: "big", Kind: "k", Body: []byte("small")}); err != nil {
			t.Fatal(err)
		}
		to := urlFor(t, "embedded", ns)
		to += "&max_message_size=300"
		dst := open(t, to)
		rep, err := migrate.Run(ctx, src, dst, &migrate.Options{Lanes: []string{"big"}})
		if !errors.Is(err, migrate.ErrIncomplete) || !strings.Contains(err.Error(), "too large") {
			t.Fatalf("err = %v", err)
		}
		if len(rep.Failures) != 1 || rep.Failures[0].ID != big.ID || !errors.Is(rep.Failures[0].Err, broker.ErrTooLarge) || rep.Moved != 1 {
			t.Fatalf("report %+v", rep)
		}
		s, _ := src.Stats(ctx, "big")
		if s.Ready != 1 {
			t.Fatalf("the big message must be back on the source, ready: %+v", s)
		}
		ds, err := src.Receive(ctx, broker.ReceiveRequest{Lane: "big", Max: 1, Wait: time.Second})
		if err != nil || len(ds) != 1 || ds[0].ID != big.ID || ds[0].Attempt != 1 {
			t.Fatalf("big message: %v %+v", err, ds)
		}
		_ = src.Release(ctx, ds[0], 0)
	})
	t.Run("too large for SQS", func(t *testing.T) {
		// An SQS target whose queues take 256 KiB (AWS's limit until 2025;
		// the emulator's default is 1 MiB): a 200 KiB body no longer fits
		// once base64-encoded in its envelope. A live message and a dead
		// letter that big stay on the source, with the reason; the small
		// one moves.
		ctx := ctxFor(t, 2*time.Minute)
		big := &broker.Message{Lane: "huge", Kind: "k", Body: make([]byte, 200<<10)}
		bigDead := &broker.Message{Lane: "huge", Kind: "k", Body: make([]byte, 200<<10)}
		small := &broker.Message{Lane: "huge", Kind: "k", Body: []byte("small")}
		if _, err := src.Publish(ctx, bigDead); err != nil {
			t.Fatal(err)
		}
		ds, err := src.Receive(ctx, broker.ReceiveRequest{Lane: "huge", Max: 1, Wait: time.Second})
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive: %v %d", err, len(ds))
		}
		if err := src.DeadLetter(ctx, ds[0], &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "too big to handle"}); err != nil {
			t.Fatal(err)
		}
		if _, err := src.Publish(ctx, big, small); err != nil {
			t.Fatal(err)
		}
		to := urlFor(t, "sqs", ns) + "&max_message_size=262144"
		rep, err := migrate.RunURL(ctx, fromURL, to, nil, &migrate.Options{Lanes: []string{"huge"}, IncludeDeadLetters: true})
		if !errors.Is(err, migrate.ErrIncomplete) || !strings.Contains(err.Error(), "too large") {
			t.Fatalf("err = %v", err)
		}
		failed := map[string]bool{}
		for _, f := range rep.Failures {
			if !errors.Is(f.Err, broker.ErrTooLarge) || !strings.Contains(f.Reason, "too large for the target") {
				t.Errorf("failure %+v", f)
			}
			failed[f.ID] = f.DeadLetter
		}
		if len(rep.Failures) != 2 || failed[big.ID] || !failed[bigDead.ID] || rep.Moved != 1 {
			t.Fatalf("report: moved %d, failures %+v", rep.Moved, rep.Failures)
		}
		s, _ := src.Stats(ctx, "huge")
		if s.Ready != 1 || s.DeadLettered != 1 || s.InFlight != 0 {
			t.Fatalf("the big messages must be back on the source: %+v", s)
		}
		ds, err = src.Receive(ctx, broker.ReceiveRequest{Lane: "huge", Max: 1, Wait: time.Second})
		if err != nil || len(ds) != 1 || ds[0].ID != big.ID || ds[0].Attempt != 1 || len(ds[0].Body) != 200<<10 {
			t.Fatalf("big message: %v %+v", err, ds)
		}
		_ = src.Release(ctx, ds[0], 0)
		ds, err = src.Receive(ctx, broker.ReceiveRequest{Lane: "huge", Max: 1, Wait: time.Second, DeadLetters: true})
		if err != nil || len(ds) != 1 || ds[0].ID != bigDead.ID || ds[0].DeadLetter == nil || ds[0].DeadLetter.Error != "too big to handle" {
			t.Fatalf("big dead letter: %v %+v", err, ds)
		}
		_ = src.Release(ctx, ds[0], 0)
		dst := open(t, to)
		if s, err := dst.Stats(ctx, "huge"); err != nil || s.Ready != 1 || s.DeadLettered != 0 {
			t.Fatalf("the target must hold the small message only: %+v %v", s, err)
		}
	})
	t.Run("no lanes", func(t *testing.T) {
		if _, err := migrate.Run(ctxFor(t, time.Minute), src, open(t, urlFor(t, "embedded", ns)), &migrate.Options{Lanes: []string{"bad lane"}}); !errors.Is(err, broker.ErrInvalid) {
			t.Fatalf("err = %v", err)
		}
	})
}
