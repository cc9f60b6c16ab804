package conformance

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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// ChaosOptions size the chaos case.
type ChaosOptions struct {
	// Tasks to run; each has three steps and one external effect. Defaults
	// to 1000.
	Tasks int
	// Workers is how many worker processes run at once. Defaults to 3.
	Workers int
	// MinKills is the least number of SIGKILLs the run must deliver.
	// Defaults to 50.
	MinKills int
	// Timeout bounds the whole run while tasks keep completing: past it,
	// the run fails as soon as chaosStall passes without a task
	// completing, and at twice Timeout in any case. Defaults to 4 minutes.
	Timeout time.Duration
}

// chaosStall is how long a chaos run past its Timeout may go without a
// task completing (a worker's lease is 2 s; a kill's restart under -race
// on a loaded machine takes a few seconds).
const chaosStall = 30 * time.Second

type chaosArgs struct {
	N int `json:"n"`
}

func (chaosArgs) Kind() string { return "conformance.chaos" }

const chaosDirEnv = "SWITCHYARD_CONFORMANCE_CHAOS_DIR"

// chaosWorker is a worker process of the chaos case. Every step computation
// and effect is appended to a log of its own (one per process), with a
// nonce and a timestamp, so the parent can count them after the run.
func chaosWorker() int {
	ctx := context.Background()
	dir := os.Getenv(chaosDirEnv)
	logPath := filepath.Join(dir, fmt.Sprintf("worker-%d.log", os.Getpid()))
	L, err := ledger.Open(ctx, os.Getenv(childLedgerEnv))
	if err != nil {
		fmt.Printf("ERROR ledger: %v\n", err)
		return 2
	}
	b, err := broker.Open(ctx, os.Getenv(childURLEnv), &broker.Options{Dedup: L})
	if err != nil {
		fmt.Printf("ERROR broker: %v\n", err)
		return 2
	}
	srv, err := switchyard.NewServer(b, &scheduler.Config{Ledger: L, Slots: 8, Lease: 2 * time.Second, PollWait: 100 * time.Millisecond,
		Retry:  scheduler.RetryPolicy{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 1000},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Printf("ERROR server: %v\n", err)
		return 2
	}
	record := func(kind, task, name string) (string, error) {
		nonce := strconv.FormatUint(rand.Uint64(), 36)
		return nonce, appendLine(logPath, fmt.Sprintf("%s %s %s %s %d", kind, task, name, nonce, time.Now().UnixNano()))
	}
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[chaosArgs]) error {
		for _, name := range []string{"extract", "analyze", "draft"} {
			if _, err := switchyard.Step(ctx, name, func(ctx context.Context) (string, error) {
				time.Sleep(time.Duration(10+rand.IntN(20)) * time.Millisecond) // the model call
				return record("step", tk.ID, name)
			}); err != nil {
				return err
			}
		}
		_, err := switchyard.Effect(ctx, "publish", func(ctx context.Context) (string, error) {
			return record("effect", tk.ID, "publish")
		}, &switchyard.EffectOpts{Reconcile: func(ctx context.Context) (bool, []byte, error) {
			// Ask "the other system": did the publish happen?
			nonce, ok, err := findEffect(dir, tk.ID)
			if err != nil || !ok {
				return false, nil, err
			}
			return true, []byte(strconv.Quote(nonce)), nil
		}})
		return err
	}, nil)
	if err := srv.Start(ctx); err != nil {
		fmt.Printf("ERROR start: %v\n", err)
		return 2
	}
	fmt.Println("READY")
	time.Sleep(time.Hour) // killed by the parent
	return 3
}

// findEffect scans every worker's log for the task's effect.
func findEffect(dir, task string) (string, bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "worker-*.log"))
	if err != nil {
		return "", false, err
	}
	appendMu.Lock()
	defer appendMu.Unlock()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", false, err
		}
		for _, l := range strings.Split(string(b), "\n") {
			p := strings.Fields(l)
			if len(p) == 5 && p[0] == "effect" && p[1] == task {
				return p[3], true, nil
			}
		}
	}
	return "", false, nil
}

// TestChaos runs Tasks three-step tasks with one external effect each on
// worker processes that are SIGKILLed at random moments, at least MinKills
// times. At the end every task is completed, no step whose output was
// recorded was computed again, and no effect was performed twice. It logs
// the counts.
func TestChaos(t *testing.T, h *Harness, o ChaosOptions) {
	if maybeChild() {
		return
	}
	noSpawnFromChild(t)
	h.require(t, CanOutliveProcess)
	if o.Tasks <= 0 {
		o.Tasks = 1000
	}
	if o.Workers <= 0 {
		o.Workers = 3
	}
	if o.MinKills <= 0 {
		o.MinKills = 50
	}
	if o.Timeout <= 0 {
		o.Timeout = 4 * time.Minute
	}
	dir := t.TempDir()
	dsn := ledgerDSN(t, h)
	e := newEnv(t, h, dsn, nil)
	ids := make([]string, 0, o.Tasks)
	for i := 0; i < o.Tasks; i++ {
		ids = append(ids, e.enqueue(chaosArgs{N: i}, &switchyard.EnqueueOpts{Lane: "batch"}))
	}

	top := strings.SplitN(t.Name(), "/", 2)[0]
	type worker struct {
		cmd      *exec.Cmd
		ready    chan struct{}
		readyAt  time.Time
		lifetime time.Duration
	}
	start := func() *worker {
		w := &worker{ready: make(chan struct{}), lifetime: time.Duration(150+rand.IntN(500)) * time.Millisecond}
		cmd := exec.Command(os.Args[0], "-test.run=^"+top+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"=chaos", childURLEnv+"="+h.URL, childLedgerEnv+"="+dsn, chaosDirEnv+"="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.cmd = cmd
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				switch l := sc.Text(); {
				case l == "READY":
					close(w.ready)
				case strings.HasPrefix(l, "ERROR"):
					t.Errorf("chaos worker %d: %s", cmd.Process.Pid, l)
				}
			}
		}()
		return w
	}
	workers := make([]*worker, o.Workers)
	for i := range workers {
		workers[i] = start()
	}
	defer func() {
		for _, w := range workers {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	}()

	began := time.Now()
	deadline := began.Add(o.Timeout)
	kills := 0
	// Unless the kills are behind, a kill waits for killStep completions
	// since the one before it: the lifetimes below are wall time,
	// and on a slow machine (-race, a load of 15 on two cores) workers
	// killed every half second finished about one task each before they
	// died, holding others until their leases ended: 917 of 2,000 tasks
	// in four minutes, with 559 kills. The kills now wait on progress.
	killStep := max(1, o.Tasks/(3*o.MinKills))
	killedAt := 0 // completed at the last kill
	done := func() int {
		n := 0
		after := ""
		for {
			ts, err := e.L.List(ctxFor(t, 30*time.Second), ledger.Filter{States: []ledger.State{ledger.Completed}, Limit: 1000, After: after})
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			n += len(ts)
			if len(ts) < 1000 {
				return n
			}
			after = ts[len(ts)-1].ID
		}
	}
	completed := 0
	lastCheck := time.Time{}
	// A slow machine (-race at a load of 20 on two cores: 1,261 of
	// 2,000 tasks in four minutes with 67 kills) still completes the run
	// if given the time; a lost or stuck task stops the progress.
	lastCompleted, lastProgress := 0, began
	for {
		if time.Since(lastCheck) > 250*time.Millisecond {
			completed = done()
			lastCheck = time.Now()
		}
		if completed == o.Tasks {
			break
		}
		if completed > lastCompleted {
			lastCompleted, lastProgress = completed, time.Now()
		}
		if now := time.Now(); now.After(deadline) && (now.Sub(lastProgress) > chaosStall || now.After(began.Add(2*o.Timeout))) {
			var stuck []string
			for _, id := range ids {
				tk, err := e.L.Get(ctxFor(t, 10*time.Second), id)
				if err != nil || tk.State != ledger.Completed {
					if len(stuck) < 5 {
						evs, _ := e.L.Events(ctxFor(t, 10*time.Second), id)
						last := ""
						for _, ev := range evs[max(0, len(evs)-6):] {
							last += fmt.Sprintf(" [%s→%s %s %q]", ev.From, ev.To, ev.Reason, ev.Detail)
						}
						if tk != nil {
							stuck = append(stuck, fmt.Sprintf("%s %s attempt %d lease %v last error %q; events%s", id, tk.State, tk.Attempt, tk.LeaseUntil, tk.LastError, last))
						} else {
							stuck = append(stuck, fmt.Sprintf("%s: %v", id, err))
						}
					}
				}
			}
			t.Fatalf("after %s (the last completion %s ago): %d of %d tasks completed, %d kills; not completed: %s",
				time.Since(began).Round(time.Second), time.Since(lastProgress).Round(time.Second), completed, o.Tasks, kills, strings.Join(stuck, "; "))
		}
		time.Sleep(20 * time.Millisecond)
		for i, w := range workers {
			select {
			case <-w.ready:
				if w.readyAt.IsZero() {
					w.readyAt = time.Now()
				}
			default:
				continue
			}
			// Each worker lives a random 0.15–0.65 s after it is ready, then
			// dies mid-work with SIGKILL and is replaced. When the kills fall
			// behind the work (a fast broker on an idle machine can finish
			// before MinKills at that pace), lives shrink to 20–120 ms, so
			// the run reaches MinKills however fast the tasks go.
			life := w.lifetime
			behind := float64(kills) < 1.25*float64(o.MinKills)*float64(completed)/float64(o.Tasks)
			if behind {
				life = min(life, 20*time.Millisecond+w.lifetime/5)
			}
			if time.Since(w.readyAt) < life || (!behind && completed-killedAt < killStep) {
				continue
			}
			if err := w.cmd.Process.Signal(syscall.SIGKILL); err == nil {
				kills++
				killedAt = completed
			}
			_ = w.cmd.Wait()
			workers[i] = start()
		}
	}
	elapsed := time.Since(began)

	// Count what the logs say happened.
	type comp struct {
		nonce string
		at    int64
	}
	steps := map[string][]comp{}
	effects := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "worker-*.log"))
	for _, f := range files {
		for _, l := range readLines(t, f) {
			p := strings.Fields(l)
			if len(p) != 5 {
				continue // a line cut by a kill
			}
			at, _ := strconv.ParseInt(p[4], 10, 64)
			switch p[0] {
			case "step":
				steps[p[1]+"/"+p[2]] = append(steps[p[1]+"/"+p[2]], comp{p[3], at})
			case "effect":
				effects[p[1]]++
			}
		}
	}
	computed, interrupted, recomputedAfterRecord, effectTwice := 0, 0, 0, 0
	for _, id := range ids {
		for _, name := range []string{"extract", "analyze", "draft"} {
			cs := steps[id+"/"+name]
			computed += len(cs)
			out, ok, err := e.L.GetStep(ctxFor(t, 10*time.Second), id, name)
			if err != nil || !ok {
				t.Errorf("task %s step %s has no recorded output (%v)", id, name, err)
				continue
			}
			var nonce string
			_ = jsonUnquote(out, &nonce)
			var recordedAt int64 = -1
			for _, c := range cs {
				if c.nonce == nonce {
					recordedAt = c.at
				}
			}
			if recordedAt < 0 {
				t.Errorf("task %s step %s: the recorded output %q was computed by nobody", id, name, nonce)
				continue
			}
			for _, c := range cs {
				switch {
				case c.nonce == nonce:
				case c.at < recordedAt:
					interrupted++ // computed, then killed before it was recorded
				default:
					recomputedAfterRecord++
				}
			}
		}
		if effects[id] != 1 {
			effectTwice += max(effects[id]-1, 0)
			if effects[id] == 0 {
				t.Errorf("task %s completed without its effect", id)
			}
		}
	}
	t.Logf("chaos: %d tasks completed in %s with %d SIGKILLs of %d workers; %d step computations for %d steps (%d interrupted by a kill before being recorded, %d recomputed after being recorded); %d effects performed, %d performed twice",
		completed, elapsed.Round(time.Millisecond), kills, o.Workers, computed, 3*o.Tasks, interrupted, recomputedAfterRecord, len(effects), effectTwice)
	if kills < o.MinKills {
		t.Errorf("only %d kills, want at least %d: make the tasks slower", kills, o.MinKills)
	}
	if recomputedAfterRecord != 0 {
		t.Errorf("%d step outputs were computed again after being recorded", recomputedAfterRecord)
	}
	if effectTwice != 0 {
		t.Errorf("%d effects were performed twice", effectTwice)
	}
}

func jsonUnquote(b []byte, s *string) error {
	v, err := strconv.Unquote(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
