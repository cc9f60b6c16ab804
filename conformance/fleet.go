package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// The fleet ordering case: ordering by key (contract point 8) across
// processes, as a team runs it. Two publisher processes enqueue 40 tasks
// for each of 50 keys, concurrently; three consumer processes run them with
// handlers of random length; one consumer is SIGKILLed mid-run. Every
// process appends what it did to a log of its own (enqueue windows,
// handler starts and finishes, with the clock), and the parent checks the
// logs:
//
//   - no task is lost (each finishes at least once);
//   - no two runs of one key overlap (a killed run lasts until the kill);
//   - tasks start in enqueue order: when task X's Enqueue returned before
//     task Y's (same key) began, X first starts before Y first starts.
//
// FleetOptions.NoLedger runs it without a ledger: on a broker that orders
// natively the same checks apply; on one that does not, a keyed enqueue
// must be refused with broker.ErrNoSequencer (nothing out of order, and
// the error says what is missing).

// FleetOptions tunes TestOrderingFleet.
type FleetOptions struct {
	// Keys and PerKey default to 50 and 40.
	Keys, PerKey int
	// NoLedger runs publishers and consumers without a ledger.
	NoLedger bool
	// Timeout bounds the run; default 4 minutes.
	Timeout time.Duration
}

type fleetArgs struct {
	Name string `json:"name"` // key-publisher-index
}

func (fleetArgs) Kind() string { return "conformance.fleet" }

const (
	fleetDirEnv  = "SWITCHYARD_CONFORMANCE_FLEET_DIR"
	fleetPubEnv  = "SWITCHYARD_CONFORMANCE_FLEET_PUBLISHER"
	fleetKeysEnv = "SWITCHYARD_CONFORMANCE_FLEET_KEYS"
	fleetLane    = "interactive"
)

func fleetKey(k int) string { return fmt.Sprintf("conv-%02d", k) }

// fleetOpen opens the child's broker, and its ledger when one is given.
func fleetOpen(ctx context.Context) (*broker.Broker, ledger.Ledger, error) {
	var (
		L    ledger.Ledger
		opts broker.Options
		err  error
	)
	if dsn := os.Getenv(childLedgerEnv); dsn != "" {
		if L, err = ledger.Open(ctx, dsn); err != nil {
			return nil, nil, err
		}
		opts.Dedup = L
	}
	opts.OrderingRetry = 50 * time.Millisecond
	b, err := broker.Open(ctx, os.Getenv(childURLEnv), &opts)
	return b, L, err
}

// fleetPublisher enqueues PerKey/2 tasks for every key, keys in parallel
// and each key's tasks one after another, logging each Enqueue's window.
func fleetPublisher() int {
	ctx := context.Background()
	b, L, err := fleetOpen(ctx)
	if err != nil {
		fmt.Printf("ERROR open: %v\n", err)
		return 2
	}
	var ccfg *switchyard.ClientConfig
	if L != nil {
		ccfg = &switchyard.ClientConfig{Ledger: L}
	}
	c, err := switchyard.NewClient(b, ccfg)
	if err != nil {
		fmt.Printf("ERROR client: %v\n", err)
		return 2
	}
	pub, _ := strconv.Atoi(os.Getenv(fleetPubEnv))
	var keys, per int
	if _, err := fmt.Sscanf(os.Getenv(fleetKeysEnv), "%d/%d", &keys, &per); err != nil {
		fmt.Printf("ERROR keys: %v\n", err)
		return 2
	}
	logPath := filepath.Join(os.Getenv(fleetDirEnv), fmt.Sprintf("publisher-%d.log", pub))
	// The parent closes stdin to stop it early (its test ended): the
	// Enqueues under way finish, no other starts, and it closes its
	// broker before it exits (fleetProc.stop).
	var stopped atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stopped.Store(true)
	}()
	defer closeFleetChild(b, L)
	fmt.Println("READY")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	work := make(chan int)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				mu.Lock()
				failed := firstErr != nil
				mu.Unlock()
				if failed || stopped.Load() {
					continue // drain the keys left
				}
				for i := range per / 2 {
					if stopped.Load() {
						break
					}
					name := fmt.Sprintf("%d-%d-%d", k, pub, i)
					began := time.Now().UnixNano()
					_, err := c.Enqueue(ctx, fleetArgs{Name: name}, &switchyard.EnqueueOpts{Lane: fleetLane, OrderingKey: fleetKey(k)})
					if err == nil {
						err = appendLine(logPath, fmt.Sprintf("E %s %d %d", name, began, time.Now().UnixNano()))
					}
					if err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
						break
					}
				}
			}
		}()
	}
	for k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		if errors.Is(firstErr, broker.ErrNoSequencer) {
			fmt.Printf("REFUSED %v\n", firstErr)
			return 0
		}
		fmt.Printf("ERROR enqueue: %v\n", firstErr)
		return 2
	}
	if stopped.Load() {
		fmt.Println("STOPPED")
		return 0
	}
	fmt.Println("DONE")
	return 0
}

// closeFleetChild closes a child's broker and ledger before it exits, so
// that its connections end cleanly, after every declaration it made.
func closeFleetChild(b *broker.Broker, L ledger.Ledger) {
	_ = b.Close()
	if L != nil {
		_ = L.Close()
	}
}

// fleetConsumer runs a Server whose handler logs its start and finish.
func fleetConsumer() int {
	ctx := context.Background()
	b, L, err := fleetOpen(ctx)
	if err != nil {
		fmt.Printf("ERROR open: %v\n", err)
		return 2
	}
	logPath := filepath.Join(os.Getenv(fleetDirEnv), fmt.Sprintf("consumer-%d.log", os.Getpid()))
	cfg := &scheduler.Config{Slots: 8, Lease: 2 * time.Second, PollWait: 100 * time.Millisecond,
		Retry:  scheduler.RetryPolicy{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 1000},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if L != nil {
		cfg.Ledger = L
	}
	srv, err := switchyard.NewServer(b, cfg)
	if err != nil {
		fmt.Printf("ERROR server: %v\n", err)
		return 2
	}
	pid := os.Getpid()
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[fleetArgs]) error {
		if err := appendLine(logPath, fmt.Sprintf("S %s %d %d", tk.Args.Name, time.Now().UnixNano(), pid)); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(10_000)) * time.Microsecond) // the work
		return appendLine(logPath, fmt.Sprintf("F %s %d %d", tk.Args.Name, time.Now().UnixNano(), pid))
	}, nil)
	if err := srv.Start(ctx); err != nil {
		fmt.Printf("ERROR start: %v\n", err)
		return 2
	}
	fmt.Println("READY")
	// Until the parent SIGKILLs it (the crash the case is about) or
	// closes its stdin (the end of the test, or the parent is gone): then
	// it stops its Server and closes its broker, so that no declaration
	// of a queue is under way when the parent's cleanup deletes them.
	_, _ = io.Copy(io.Discard, os.Stdin)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := srv.Stop(sctx); err != nil {
		fmt.Fprintf(os.Stderr, "fleet consumer: stop: %v\n", err)
	}
	closeFleetChild(b, L)
	return 0
}

// fleetProc is a child process of the fleet case.
type fleetProc struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	lines  chan string   // READY, DONE, REFUSED …, ERROR …
	exited chan struct{} // closed once the process has exited (cmd.Wait returned)
	once   sync.Once
}

// kill SIGKILLs the process and waits for it to exit.
func (p *fleetProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop closes the process's stdin, which makes it finish what it is
// doing (an Enqueue, a handler, a queue declaration), stop, close its
// broker and exit; one that has not exited within d is SIGKILLed. It
// returns once the process has exited, and reports whether it exited by
// itself (a process already killed counts as such).
func (p *fleetProc) stop(d time.Duration) (clean bool) {
	clean = true
	p.once.Do(func() {
		_ = p.stdin.Close()
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-p.exited:
		case <-timer.C:
			clean = false
			p.kill()
		}
	})
	<-p.exited
	return clean
}

// stopFleet stops every process at once (fleetProc.stop) and returns
// once all have exited; it fails t for each that had to be killed.
func stopFleet(t *testing.T, procs []*fleetProc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !p.stop(30 * time.Second) {
				t.Errorf("fleet process %d did not stop within 30s of its stdin closing: SIGKILLed", p.cmd.Process.Pid)
			}
		}()
	}
	wg.Wait()
}

// TestOrderingFleet runs the fleet ordering case (see FleetOptions). Like
// TestChaos it re-executes the test binary, so it must be called from a
// top-level test whose child processes reach Run or RunE2E (which
// recognise them).
func TestOrderingFleet(t *testing.T, h *Harness, o FleetOptions) {
	if maybeChild() {
		return
	}
	noSpawnFromChild(t)
	h.require(t, CanOutliveProcess)
	if o.Keys <= 0 {
		o.Keys = 50
	}
	if o.PerKey <= 0 {
		o.PerKey = 40
	}
	o.PerKey += o.PerKey % 2 // two publishers, half each
	if o.Timeout <= 0 {
		o.Timeout = 4 * time.Minute
	}
	dir := t.TempDir()
	dsn := ""
	if !o.NoLedger {
		dsn = ledgerDSN(t, h)
		openLedger(t, dsn) // migrate it once, before the children race to
	}
	top := strings.SplitN(t.Name(), "/", 2)[0]
	// Every process is stopped, and has exited, before the test's other
	// cleanups run (they were registered before this one): the
	// harness's may delete the namespace's queues, and deleting a queue
	// that a process is declaring at that moment (one SIGKILLed mid-
	// declaration leaves it to the broker to finish) can crash the
	// broker's workers for it (RabbitMQ 3.10's dead-letter workers: two
	// such crashes at once stop their supervisor for good; see
	// adapters/rabbitmq/doc.go). So processes are stopped, not killed,
	// at the end: each finishes its work, closes its broker and exits.
	var procs []*fleetProc
	t.Cleanup(func() { stopFleet(t, procs) })
	start := func(mode string, extra ...string) *fleetProc {
		cmd := exec.Command(os.Args[0], "-test.run=^"+top+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+mode, childURLEnv+"="+h.URL, childLedgerEnv+"="+dsn,
			fleetDirEnv+"="+dir, fleetKeysEnv+"="+fmt.Sprintf("%d/%d", o.Keys, o.PerKey))
		cmd.Env = append(cmd.Env, extra...)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &fleetProc{cmd: cmd, stdin: in, lines: make(chan string, 8), exited: make(chan struct{})}
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				select {
				case p.lines <- sc.Text():
				default: // nobody reads that many lines: drop
				}
			}
			close(p.lines)
			_ = cmd.Wait() // after the last read of out, as Wait requires
			close(p.exited)
		}()
		procs = append(procs, p)
		return p
	}
	wait := func(p *fleetProc, what string, d time.Duration) string {
		t.Helper()
		timer := time.NewTimer(d)
		defer timer.Stop()
		for {
			select {
			case l, ok := <-p.lines:
				if !ok {
					t.Fatalf("%s: the process ended without a word", what)
				}
				if strings.HasPrefix(l, "ERROR") {
					t.Fatalf("%s: %s", what, l)
				}
				return l
			case <-timer.C:
				t.Fatalf("%s: nothing said within %v", what, d)
			}
		}
	}

	var consumers []*fleetProc
	for range 3 {
		consumers = append(consumers, start("fleet-consumer"))
	}
	for i, c := range consumers {
		if l := wait(c, fmt.Sprintf("consumer %d", i), 60*time.Second); l != "READY" {
			t.Fatalf("consumer %d: %q", i, l)
		}
	}
	began := time.Now()
	pubs := []*fleetProc{start("fleet-publisher", fleetPubEnv+"=0"), start("fleet-publisher", fleetPubEnv+"=1")}
	for i, p := range pubs {
		if l := wait(p, fmt.Sprintf("publisher %d", i), 60*time.Second); l != "READY" {
			t.Fatalf("publisher %d: %q", i, l)
		}
	}
	total := o.Keys * o.PerKey
	var killedPid int
	var killedAt int64
	deadline := time.Now().Add(o.Timeout)
	pubDone := make([]bool, len(pubs))
	for slices.Contains(pubDone, false) {
		for i, p := range pubs {
			if pubDone[i] {
				continue
			}
			select {
			case l, ok := <-p.lines:
				switch {
				case !ok:
					t.Fatalf("publisher %d ended without a word", i)
				case strings.HasPrefix(l, "REFUSED"):
					if !o.NoLedger {
						t.Fatalf("publisher %d was refused with a ledger: %s", i, l)
					}
					if !strings.Contains(l, "ledger") || !strings.Contains(l, "Sequencer") {
						t.Errorf("the refusal should say what is missing: %s", l)
					}
					t.Logf("without a ledger this broker refuses keyed work, as it must: %s", l)
					return
				case l == "DONE":
					pubDone[i] = true
				default:
					t.Fatalf("publisher %d: %s", i, l)
				}
			default:
			}
		}
		if killedPid == 0 && finishedCount(t, dir) >= total/4 {
			killedPid, killedAt = consumers[0].cmd.Process.Pid, time.Now().UnixNano()
			consumers[0].kill()
			t.Logf("consumer %d SIGKILLed after %v", killedPid, time.Since(began).Round(time.Millisecond))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the publishers did not finish within %v", o.Timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for time.Now().Before(deadline) {
		n := finishedCount(t, dir)
		if killedPid == 0 && n >= total/4 {
			killedPid, killedAt = consumers[0].cmd.Process.Pid, time.Now().UnixNano()
			consumers[0].kill()
			t.Logf("consumer %d SIGKILLed after %v", killedPid, time.Since(began).Round(time.Millisecond))
		}
		if n >= total {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(began)
	stopFleet(t, procs) // every handler has returned, every log is complete
	checkFleetLogs(t, dir, total, killedPid, killedAt)
	t.Logf("%d tasks over %d keys, 2 publishers and 3 consumers (one killed): done in %v", total, o.Keys, took.Round(time.Millisecond))
}

// finishedCount counts the distinct tasks with a finish record.
func finishedCount(t *testing.T, dir string) int {
	done := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "consumer-*.log"))
	for _, f := range files {
		for _, l := range readLines(t, f) {
			if fs := strings.Fields(l); len(fs) == 4 && fs[0] == "F" {
				done[fs[1]] = true
			}
		}
	}
	return len(done)
}

type fleetRun struct {
	name       string
	start, end int64
	pid        int
}

// checkFleetLogs reads every process's log and checks loss, overlap and
// order (see the case's comment).
func checkFleetLogs(t *testing.T, dir string, total, killedPid int, killedAt int64) {
	t.Helper()
	type window struct{ began, ended int64 }
	enq := map[string]window{}
	pubFiles, _ := filepath.Glob(filepath.Join(dir, "publisher-*.log"))
	for _, f := range pubFiles {
		for _, l := range readLines(t, f) {
			var name string
			var w window
			if _, err := fmt.Sscanf(l, "E %s %d %d", &name, &w.began, &w.ended); err != nil {
				t.Fatalf("publisher log %s: %q: %v", f, l, err)
			}
			enq[name] = w
		}
	}
	if len(enq) != total {
		t.Fatalf("%d tasks enqueued, want %d", len(enq), total)
	}
	type open struct {
		start int64
		pid   int
	}
	var runs []fleetRun
	finished := map[string]bool{}
	conFiles, _ := filepath.Glob(filepath.Join(dir, "consumer-*.log"))
	for _, f := range conFiles {
		starts := map[string]open{}
		for _, l := range readLines(t, f) {
			fs := strings.Fields(l)
			if len(fs) != 4 {
				t.Fatalf("consumer log %s: %q", f, l)
			}
			at, _ := strconv.ParseInt(fs[2], 10, 64)
			pid, _ := strconv.Atoi(fs[3])
			switch fs[0] {
			case "S":
				if prev, ok := starts[fs[1]]; ok {
					t.Errorf("%s started twice in process %d without finishing (at %d and %d)", fs[1], pid, prev.start, at)
				}
				starts[fs[1]] = open{at, pid}
			case "F":
				s, ok := starts[fs[1]]
				if !ok {
					t.Errorf("%s finished in process %d without a start", fs[1], pid)
					continue
				}
				delete(starts, fs[1])
				runs = append(runs, fleetRun{fs[1], s.start, at, pid})
				finished[fs[1]] = true
			}
		}
		for name, s := range starts {
			if s.pid != killedPid {
				t.Errorf("%s started in process %d, which was not killed, and never finished", name, s.pid)
				continue
			}
			runs = append(runs, fleetRun{name, s.start, killedAt, s.pid}) // ended by the kill
		}
	}
	var lost []string
	for name := range enq {
		if !finished[name] {
			lost = append(lost, name)
		}
	}
	if len(lost) > 0 {
		sort.Strings(lost)
		t.Fatalf("%d of %d tasks never finished (lost or stuck), e.g. %v", len(lost), total, lost[:min(len(lost), 10)])
	}
	byKey := map[string][]fleetRun{}
	for _, r := range runs {
		k := r.name[:strings.IndexByte(r.name, '-')]
		byKey[k] = append(byKey[k], r)
	}
	overlaps, disorder := 0, 0
	for k, rs := range byKey {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
		for i := 1; i < len(rs); i++ {
			if rs[i].start < rs[i-1].end {
				if overlaps++; overlaps <= 10 {
					t.Errorf("key %s: %s (process %d) started at %d while %s (process %d) ran until %d",
						k, rs[i].name, rs[i].pid, rs[i].start, rs[i-1].name, rs[i-1].pid, rs[i-1].end)
				}
			}
		}
		first := map[string]int64{}
		for _, r := range rs {
			if _, ok := first[r.name]; !ok {
				first[r.name] = r.start
			}
		}
		for x, fx := range first {
			for y, fy := range first {
				if enq[x].ended < enq[y].began && fy < fx {
					if disorder++; disorder <= 10 {
						t.Errorf("key %s: %s started before %s, which was enqueued first", k, y, x)
					}
				}
			}
		}
	}
	if overlaps+disorder > 0 {
		t.Errorf("%d overlaps and %d out-of-order starts in %d runs", overlaps, disorder, len(runs))
	}
}
