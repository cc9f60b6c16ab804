package rabbitmq

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// The multi-process test of the at-least-once delay path: producer and
// worker processes (this test binary run again as children, selected by
// mpRoleEnv) share one namespace through the public Client and Server;
// every process appends what it did to a file of its own in a shared
// directory (one write per line, O_APPEND, so a SIGKILL loses nothing the
// process wrote), and the parent counts there.
const (
	mpRoleEnv  = "SWITCHYARD_TEST_RMQ_MP_ROLE" // producer-short, producer-long, worker
	mpURLEnv   = "SWITCHYARD_TEST_RMQ_MP_URL"
	mpSinkEnv  = "SWITCHYARD_TEST_RMQ_MP_SINK"
	mpGenEnv   = "SWITCHYARD_TEST_RMQ_MP_GEN"   // a producer's key prefix
	mpCountEnv = "SWITCHYARD_TEST_RMQ_MP_COUNT" // tasks a producer enqueues
	mpLane     = "scheduled"                    // the default lane of delayed tasks
)

// mpArgs is the test's task: Key names it in the sinks; the handler
// returns RetryAfter(RetryMS) while the attempt is at most Retries, so it
// goes through a delay queue again by nack-with-delay.
type mpArgs struct {
	Key     string `json:"key"`
	Retries int    `json:"retries"`
	RetryMS int    `json:"retry_ms"`
	SleepMS int    `json:"sleep_ms"`
}

func (mpArgs) Kind() string { return "test.mp" }

// mpSink appends lines to a process's file.
type mpSink struct{ f *os.File }

func openSink(path string) (*mpSink, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &mpSink{f: f}, nil
}

// line writes one line in one write(2).
func (s *mpSink) line(format string, a ...any) {
	if _, err := s.f.Write([]byte(fmt.Sprintf(format, a...) + "\n")); err != nil {
		fmt.Println("ERROR sink:", err)
		os.Exit(2)
	}
}

// mpChild is the body of a child process. It exits by itself when its
// parent is gone or after two minutes.
func mpChild() {
	role := os.Getenv(mpRoleEnv)
	fail := func(err error) {
		fmt.Println("ERROR", role, err)
		os.Exit(2)
	}
	ctx := context.Background()
	sink, err := openSink(os.Getenv(mpSinkEnv))
	if err != nil {
		fail(err)
	}
	logf, err := os.OpenFile(os.Getenv(mpSinkEnv)+".slog", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fail(err)
	}
	logger := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := broker.Open(ctx, os.Getenv(mpURLEnv), &broker.Options{Logger: logger})
	if err != nil {
		fail(err)
	}
	parent := os.Getppid()
	go func() {
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end) && os.Getppid() == parent; {
			time.Sleep(100 * time.Millisecond)
		}
		os.Exit(3)
	}()
	switch role {
	case "worker":
		srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Slots: 16, Logger: logger})
		if err != nil {
			fail(err)
		}
		if err := switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[mpArgs]) error {
			sink.line("start %s %d", t.Args.Key, t.Attempt)
			time.Sleep(time.Duration(t.Args.SleepMS) * time.Millisecond)
			if t.Attempt <= t.Args.Retries {
				sink.line("retry %s %d", t.Args.Key, t.Attempt)
				return switchyard.RetryAfter(time.Duration(t.Args.RetryMS)*time.Millisecond, nil)
			}
			sink.line("done %s %d", t.Args.Key, t.Attempt)
			return nil
		}, nil); err != nil {
			fail(err)
		}
		if err := srv.Start(ctx); err != nil {
			fail(err)
		}
		fmt.Println("READY")
		select {}
	case "producer-short", "producer-long":
		c, err := switchyard.NewClient(b, nil)
		if err != nil {
			fail(err)
		}
		n, _ := strconv.Atoi(os.Getenv(mpCountEnv))
		gen := os.Getenv(mpGenEnv)
		fmt.Println("READY")
		for i := range n {
			a := mpArgs{Key: fmt.Sprintf("%s-%d", gen, i), SleepMS: 10 + rand.IntN(50)}
			var delay time.Duration
			if role == "producer-short" {
				// Spread over the 100 ms … 1.6 s delay queues, a third
				// retried once and a third twice after 100 ms … 1.2 s.
				delay = time.Duration(50+rand.IntN(1450)) * time.Millisecond
				a.Retries, a.RetryMS = i%3, 100+rand.IntN(1100)
			} else {
				// All in the 3.2 s delay queue, half retried once.
				delay = time.Duration(3000+rand.IntN(200)) * time.Millisecond
				a.Retries, a.RetryMS = i%2, 300+rand.IntN(300)
			}
			sink.line("try %s", a.Key)
			ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
			runAt := time.Now().Add(delay)
			_, err := c.Enqueue(ectx, a, &switchyard.EnqueueOpts{RunAt: runAt})
			cancel()
			if err != nil {
				sink.line("err %s %s %s", a.Key, broker.ClassOf(err), strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				sink.line("ok %s %d", a.Key, runAt.UnixNano())
			}
			if role == "producer-short" {
				time.Sleep(10 * time.Millisecond)
			}
		}
		b.Close()
		fmt.Println("DONE")
		os.Exit(0)
	}
	fail(fmt.Errorf("unknown role %q", role))
}

// mpProc is a child process.
type mpProc struct {
	name, role, sink string
	cmd              *exec.Cmd
	ready, done      chan struct{}
	killed           bool
	once             sync.Once
}

// mpRun is one run of the test: its children and its directory.
type mpRun struct {
	t     *testing.T
	url   string
	dir   string
	mu    sync.Mutex
	procs []*mpProc
}

func (r *mpRun) start(name, role string, env ...string) *mpProc {
	t := r.t
	t.Helper()
	p := &mpProc{name: name, role: role, sink: filepath.Join(r.dir, name+".log"), ready: make(chan struct{}), done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestMultiProcess_DelayedAtLeastOnce$", "-test.count=1")
	p.cmd.Env = append(os.Environ(), append([]string{mpRoleEnv + "=" + role, mpURLEnv + "=" + r.url, mpSinkEnv + "=" + p.sink}, env...)...)
	p.cmd.Stderr = os.Stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "ERROR"):
				t.Errorf("%s: %s", name, l)
			case l == "READY":
				close(p.ready)
			}
		}
		p.cmd.Wait()
	}()
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	return p
}

// await waits until p printed READY (or exited).
func (p *mpProc) await(t *testing.T) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.done:
		t.Fatalf("%s exited before it was ready", p.name)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready in 30 s", p.name)
	}
}

// kill SIGKILLs p and waits for it.
func (p *mpProc) kill() {
	p.once.Do(func() {
		select {
		case <-p.done:
		default:
			p.killed = true
			p.cmd.Process.Signal(syscall.SIGKILL)
		}
		<-p.done
	})
}

// mpTally is what the sinks say.
type mpTally struct {
	tried     map[string]bool
	ok        map[string]time.Time // key → requested run time
	failed    map[string]string    // key → error class
	done      map[string][]string  // key → the processes that wrote done, in order
	retries   int
	starts    int
	startedBy map[string][]string // key → processes that started it
	open      map[string]int      // process → starts not followed by retry or done (killed mid-handler)
}

func (r *mpRun) tally() *mpTally {
	r.t.Helper()
	tl := &mpTally{tried: map[string]bool{}, ok: map[string]time.Time{}, failed: map[string]string{}, done: map[string][]string{},
		startedBy: map[string][]string{}, open: map[string]int{}}
	r.mu.Lock()
	procs := append([]*mpProc(nil), r.procs...)
	r.mu.Unlock()
	for _, p := range procs {
		b, err := os.ReadFile(p.sink)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			r.t.Fatal(err)
		}
		running := map[string]int{}
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "try":
				tl.tried[f[1]] = true
			case "ok":
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				tl.ok[f[1]] = time.Unix(0, ns)
			case "err":
				tl.failed[f[1]] = f[2]
			case "start":
				tl.starts++
				running[f[1]]++
				tl.startedBy[f[1]] = append(tl.startedBy[f[1]], p.name)
			case "retry":
				tl.retries++
				running[f[1]]--
			case "done":
				running[f[1]]--
				tl.done[f[1]] = append(tl.done[f[1]], p.name)
			}
		}
		for _, n := range running {
			tl.open[p.name] += n
		}
	}
	return tl
}

// missing returns the keys whose Enqueue succeeded and that no handler
// completed, sorted.
func (tl *mpTally) missing() []string {
	var out []string
	for k := range tl.ok {
		if len(tl.done[k]) == 0 {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// awaitAllDone polls the sinks until every key whose Enqueue succeeded
// was completed, or within passes.
func (r *mpRun) awaitAllDone(within time.Duration) *mpTally {
	deadline := time.Now().Add(within)
	for {
		tl := r.tally()
		if len(tl.missing()) == 0 || time.Now().After(deadline) {
			return tl
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMultiProcess_DelayedAtLeastOnce: delayed tasks (RunAt 50 ms …
// 3.2 s ahead, two thirds of them retried with RetryAfter, which nacks
// them into a delay queue again) go through the public Client and Server
// in separate processes on one namespace, under the nastiest schedule the
// test can bound in time:
//
//   - phase A: three producer processes enqueue while two worker
//     processes handle; a producer is SIGKILLed mid-publish (and one
//     started in its place), another later; a worker is SIGKILLed while
//     its handlers run (before their ack) and another started;
//   - phase B, once everything of phase A is done: two producers enqueue
//     tasks due in 3.0–3.2 s, then the lane's work queue is deleted while
//     all of them wait in the delay queue and the workers (other
//     processes) consume; it is declared again by the workers' next
//     consume (404 → redeclare), the delayed messages come back from the
//     delay queue's at-least-once dead-lettering, half of them are nacked
//     with a delay again, and a worker is SIGKILLed mid-handler.
//
// Every task whose Enqueue returned success must be handled to
// completion at least once; a task completed twice is allowed only when
// a process that ran it was killed (redelivery after a kill before ack).
func TestMultiProcess_DelayedAtLeastOnce(t *testing.T) {
	if os.Getenv(mpRoleEnv) != "" {
		mpChild()
		return
	}
	if testing.Short() {
		t.Skip("multi-process run of about 30 s; skipped with -short")
	}
	ns := newNS(t)
	u := testURL(t, ns, "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, "interactive", "scheduled", "batch", "human-review") })
	d := openDriver(t, u)
	// The delay queues the schedule uses (100 ms … 3.2 s), created while
	// the broker's dead-letter workers retry unconfirmed dead letters
	// after 1 s (instead of 180 s): phase B's delayed messages expire
	// into a deleted work queue and must come back within the test.
	withFastDLXRetry(t, func() error {
		for b := 100 * time.Millisecond; b <= 3200*time.Millisecond; b *= 2 {
			if _, err := d.declareDelay(ctxT(t, 30*time.Second), "test", mpLane, b); err != nil {
				return err
			}
		}
		return nil
	})
	r := &mpRun{t: t, url: u, dir: t.TempDir()}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range r.procs {
			p.once.Do(func() { p.cmd.Process.Signal(syscall.SIGKILL); <-p.done })
		}
	})
	began := time.Now()
	producer := func(name, role string, n int) *mpProc {
		return r.start(name, role, mpGenEnv+"="+name, mpCountEnv+"="+strconv.Itoa(n))
	}
	w1, w2 := r.start("w1", "worker"), r.start("w2", "worker")
	w1.await(t)
	w2.await(t)

	// Phase A.
	p1, p2, p3 := producer("p1", "producer-short", 400), producer("p2", "producer-short", 400), producer("p3", "producer-short", 250)
	for _, p := range []*mpProc{p1, p2, p3} {
		p.await(t)
	}
	time.Sleep(1500 * time.Millisecond)
	p1.kill() // mid-publish
	p4 := producer("p4", "producer-short", 150)
	time.Sleep(time.Second)
	w1.kill() // handlers running, not acked
	time.Sleep(300 * time.Millisecond)
	r.start("w3", "worker").await(t)
	time.Sleep(700 * time.Millisecond)
	p2.kill() // mid-publish, not replaced
	finished(t, 30*time.Second, p3, p4)
	tl := r.awaitAllDone(20 * time.Second)
	if m := tl.missing(); len(m) > 0 {
		t.Fatalf("phase A: %d of %d enqueued tasks never completed (first: %v)", len(m), len(tl.ok), m[:min(len(m), 10)])
	}
	phaseA := time.Since(began)
	okA := len(tl.ok)

	// Phase B.
	p5, p6 := producer("p5", "producer-long", 120), producer("p6", "producer-long", 120)
	finished(t, 20*time.Second, p5, p6)
	tl = r.tally()
	firstDue := time.Time{}
	for k, at := range tl.ok {
		if (strings.HasPrefix(k, "p5-") || strings.HasPrefix(k, "p6-")) && (firstDue.IsZero() || at.Before(firstDue)) {
			firstDue = at
		}
	}
	if _, err := rawChannel(t).QueueDelete(d.cfg.workQueue(mpLane), false, false, false); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if !firstDue.IsZero() && !deleted.Before(firstDue) {
		// The machine was too slow for the schedule: a message already in
		// the work queue was deleted by the test's hand, not lost.
		t.Skipf("phase B: the work queue was deleted %s after the first message was due; too slow to tell a loss from the test's deletion", deleted.Sub(firstDue))
	}
	back := make(chan time.Duration, 1)
	go func() {
		at := r.awaitQueue(d.cfg.workQueue(mpLane), 15*time.Second)
		if at.IsZero() {
			back <- -1 // not within 15 s
			return
		}
		back <- at.Sub(deleted)
	}()
	// Kill a worker once phase B's messages are being handled.
	for deadline := time.Now().Add(20 * time.Second); ; {
		tl = r.tally()
		n := 0
		for k := range tl.startedBy {
			if strings.HasPrefix(k, "p5-") || strings.HasPrefix(k, "p6-") {
				n++
			}
		}
		if n >= 20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	w2.kill()
	r.start("w4", "worker").await(t)
	tl = r.awaitAllDone(40 * time.Second)
	if m := tl.missing(); len(m) > 0 {
		t.Fatalf("phase B: %d of %d enqueued tasks never completed (first: %v)", len(m), len(tl.ok), m[:min(len(m), 10)])
	}
	redeclaredB := <-back
	okB := len(tl.ok) - okA

	// Phase C: no consumer at all while the messages expire into the
	// deleted work queue; the workers start after the last one is due.
	p7, p8 := producer("p7", "producer-long", 100), producer("p8", "producer-long", 100)
	finished(t, 20*time.Second, p7, p8)
	tl = r.tally()
	var firstDueC, lastDueC time.Time
	for k, at := range tl.ok {
		if strings.HasPrefix(k, "p7-") || strings.HasPrefix(k, "p8-") {
			if firstDueC.IsZero() || at.Before(firstDueC) {
				firstDueC = at
			}
			if at.After(lastDueC) {
				lastDueC = at
			}
		}
	}
	r.mu.Lock()
	live := append([]*mpProc(nil), r.procs...)
	r.mu.Unlock()
	for _, p := range live {
		if p.role == "worker" {
			p.kill()
		}
	}
	if _, err := rawChannel(t).QueueDelete(d.cfg.workQueue(mpLane), false, false, false); err != nil {
		t.Fatal(err)
	}
	if deletedC := time.Now(); !firstDueC.IsZero() && !deletedC.Before(firstDueC) {
		t.Skipf("phase C: the work queue was deleted %s after the first message was due; too slow to tell a loss from the test's deletion", deletedC.Sub(firstDueC))
	}
	time.Sleep(time.Until(lastDueC.Add(1500 * time.Millisecond)))
	// Every message expired with no work queue to go to: the delay
	// queue's dead-letter worker holds them (at-least-once; they are not
	// counted as ready there) until the workers declare it again.
	workAbsent := r.queueDepth(d.cfg.workQueue(mpLane)) < 0
	r.start("w5", "worker").await(t)
	r.start("w6", "worker").await(t)
	tl = r.awaitAllDone(40 * time.Second)
	time.Sleep(1500 * time.Millisecond) // a late copy would show
	tl = r.tally()
	elapsed := time.Since(began)

	// Counting.
	var phantom []string
	for k := range tl.done {
		if !tl.tried[k] {
			phantom = append(phantom, k)
		}
	}
	killed := map[string]bool{}
	r.mu.Lock()
	for _, p := range r.procs {
		if p.killed {
			killed[p.name] = true
		}
	}
	r.mu.Unlock()
	var dupsKill, dupsOther []string
	for k, by := range tl.done {
		if len(by) < 2 {
			continue
		}
		explained := false
		for _, w := range tl.startedBy[k] {
			explained = explained || killed[w]
		}
		if explained {
			dupsKill = append(dupsKill, k)
		} else {
			dupsOther = append(dupsOther, fmt.Sprintf("%s (done by %v, started by %v)", k, by, tl.startedBy[k]))
		}
	}
	sort.Strings(dupsOther)
	extra := 0 // completed tasks whose Enqueue did not report success (killed or failed mid-publish)
	for k := range tl.done {
		if _, ok := tl.ok[k]; !ok && tl.tried[k] {
			extra++
		}
	}
	cut := 0 // Enqueues a kill cut short (tried, no outcome)
	for k := range tl.tried {
		_, ok := tl.ok[k]
		_, failed := tl.failed[k]
		if !ok && !failed {
			cut++
		}
	}
	failedClass := map[string]int{}
	for _, c := range tl.failed {
		failedClass[c]++
	}
	t.Logf("%d processes, %s (phase A %s): %d tasks enqueued (A %d, B %d, C %d), %d failed Enqueues %v, %d handler starts, %d RetryAfter nacks; "+
		"killed mid-handler: %v; Enqueues cut by a kill: %d; completed without a successful Enqueue: %d",
		len(r.procs), elapsed.Round(100*time.Millisecond), phaseA.Round(100*time.Millisecond), len(tl.ok), okA, okB, len(tl.ok)-okA-okB,
		len(tl.failed), failedClass, tl.starts, tl.retries, tl.open, cut, extra)
	t.Logf("phase B: %d tasks; work queue deleted %s before the first message was due, declared again by a worker %s after the delete",
		okB, firstDue.Sub(deleted).Round(time.Millisecond), redeclaredB.Round(time.Millisecond))
	t.Logf("phase C: %d tasks; no worker and no work queue (absent when the last was due + 1.5 s: %v) until two workers started",
		len(tl.ok)-okA-okB, workAbsent)
	m := tl.missing()
	t.Logf("lost %d; completed twice or more: %d after a kill (allowed), %d otherwise; phantom %d", len(m), len(dupsKill), len(dupsOther), len(phantom))
	if len(m) > 0 {
		t.Errorf("%d of %d tasks whose Enqueue succeeded were never completed: %v", len(m), len(tl.ok), m[:min(len(m), 20)])
	}
	if len(dupsOther) > 0 {
		t.Errorf("%d tasks completed more than once with no kill of a process that ran them: %v", len(dupsOther), dupsOther[:min(len(dupsOther), 20)])
	}
	if len(phantom) > 0 {
		t.Errorf("%d completed tasks no producer tried: %v", len(phantom), phantom[:min(len(phantom), 20)])
	}
	if t.Failed() {
		r.dumpLogs()
	}
}

// awaitQueue polls until queue exists (a passive declare, on a channel of
// its own each time: a 404 closes it) and returns when it was seen, or
// the zero time after within.
func (r *mpRun) awaitQueue(queue string, within time.Duration) time.Time {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if r.queueDepth(queue) >= 0 {
			return time.Now()
		}
	}
	return time.Time{}
}

// queueDepth returns queue's ready messages, or -1 when it does not exist
// (or cannot be read).
func (r *mpRun) queueDepth(queue string) int {
	conn, err := amqp.Dial(testenv.RabbitMQ.Endpoint(r.t))
	if err != nil {
		return -1
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return -1
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return -1
	}
	return q.Messages
}

// dumpLogs prints the children's warning logs.
func (r *mpRun) dumpLogs() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		f, err := os.Open(p.sink + ".slog")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(f, 8000))
		f.Close()
		if len(b) > 0 {
			r.t.Logf("%s (%s) log:\n%s", p.name, p.role, b)
		}
	}
}

// finished waits for the processes to exit by themselves, failing t if
// one has not within d.
func finished(t *testing.T, d time.Duration, ps ...*mpProc) {
	t.Helper()
	for _, p := range ps {
		select {
		case <-p.done:
		case <-time.After(d):
			t.Fatalf("%s did not finish in %s", p.name, d)
		}
	}
}
