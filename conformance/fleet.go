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
				if failed {
					continue // drain the keys left
				}
				for i := range per / 2 {
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
	fmt.Println("DONE")
	return 0
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
	time.Sleep(time.Hour) // killed by the parent
	return 3
}

// fleetProc is a child process of the fleet case.
type fleetProc struct {
	cmd   *exec.Cmd
	lines chan string // READY, DONE, REFUSED …, ERROR …
	once  sync.Once
}

func (p *fleetProc) kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	})
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
	start := func(mode string, extra ...string) *fleetProc {
		cmd := exec.Command(os.Args[0], "-test.run=^"+top+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+mode, childURLEnv+"="+h.URL, childLedgerEnv+"="+dsn,
			fleetDirEnv+"="+dir, fleetKeysEnv+"="+fmt.Sprintf("%d/%d", o.Keys, o.PerKey))
		cmd.Env = append(cmd.Env, extra...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &fleetProc{cmd: cmd, lines: make(chan string, 8)}
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				p.lines <- sc.Text()
			}
			close(p.lines)
		}()
		t.Cleanup(p.kill)
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
	for _, c := range consumers {
		c.kill()
	}
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
