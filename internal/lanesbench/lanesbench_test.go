package lanesbench

import (
	"bytes"
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/lanes"
)

var (
	flagDuration = flag.Duration("lanes.duration", 30*time.Second, "window of each phase of BenchmarkLanes")
	flagBroker   = flag.String("lanes.broker", "", "broker URL for BenchmarkLanes (default: embedded broker in a temp file)")
	flagPrefetch = flag.Int("lanes.prefetch", 0, "per-lane prefetch of the server (default: the scheduler's)")
	flagOnly     = flag.String("lanes.only", "", "run only the scenario whose name starts with this (e.g. S3)")
	flagShare    = flag.Float64("lanes.batchshare", 0, "the batch lane's MinShare (default: lanes.Defaults')")
	flagFair     = flag.Int("lanes.fair", 0, "shards of the fair batch lane (0: 8 in S4, none elsewhere; -1: none)")
)

// BenchmarkLanes runs S1–S4 once each (b.N is ignored: use -benchtime 1x)
// and prints the table. A full run with the default 30 s window takes
// about 4–5 minutes:
//
//	go test ./internal/lanesbench/ -run '^$' -bench Lanes -benchtime 1x -timeout 20m
func BenchmarkLanes(b *testing.B) {
	ctx := context.Background()
	var reports []Report
	for _, s := range Scenarios() {
		if !strings.HasPrefix(s.Name, *flagOnly) {
			continue
		}
		o := &Options{Duration: *flagDuration, Prefetch: *flagPrefetch, FairShards: *flagFair}
		if *flagShare > 0 {
			o.Lanes = BenchLanes()
			for i := range o.Lanes {
				if o.Lanes[i].Name == lanes.Batch {
					o.Lanes[i].MinShare = *flagShare
				}
			}
		}
		r, err := Run(ctx, *flagBroker, s, o)
		if err != nil {
			b.Fatal(err)
		}
		reports = append(reports, r)
		b.Logf("%s: load %+v; idle %+v", s.Name, r.Load, r.Idle)
	}
	b.StopTimer()
	var buf bytes.Buffer
	_ = WriteTable(&buf, reports)
	os.Stdout.Write(buf.Bytes())
}

// TestScenarios runs every scenario for a few seconds, with backlogs
// scaled down to what a few seconds can use, and checks the invariants
// loosely: batch makes progress, interactive is served. No timing
// thresholds beyond sanity bounds (the machine is shared).
func TestScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the runtime for about 30 s; skipped with -short")
	}
	const window = 3 * time.Second
	for _, s := range Scenarios() {
		s.BatchTasks = min(s.BatchTasks, 3000)
		t.Run(s.Name, func(t *testing.T) {
			r, err := Run(context.Background(), "", s, &Options{Duration: window, Grace: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := WriteTable(&buf, []Report{r}); err != nil {
				t.Fatal(err)
			}
			t.Logf("\n%s", buf.String())
			if r.Load.BatchQueued != s.BatchTasks+s.QuietTasks {
				t.Errorf("batch queued %d, want %d", r.Load.BatchQueued, s.BatchTasks+s.QuietTasks)
			}
			// Batch makes progress under every load.
			if r.Load.BatchStarted == 0 {
				t.Errorf("no batch task started in %v", window)
			}
			if r.Load.BatchShare <= 0 || r.Load.BatchShare > 1.0001 {
				t.Errorf("batch share %.3f outside (0, 1]", r.Load.BatchShare)
			}
			if r.Load.BatchShare+r.Load.InteractiveShare > 1.0001 {
				t.Errorf("shares %.3f + %.3f exceed the slots", r.Load.BatchShare, r.Load.InteractiveShare)
			}
			if r.Load.BatchLongestGap > window {
				t.Errorf("batch gap %v longer than the window", r.Load.BatchLongestGap)
			}
			if s.InteractiveRate > 0 {
				for name, p := range map[string]Phase{"load": r.Load, "idle": r.Idle} {
					w := p.Interactive
					if w.Enqueued == 0 {
						t.Fatalf("%s: no interactive task enqueued", name)
					}
					// Interactive is served: a good part starts (S3
					// offers the whole pool's capacity, more than a
					// race-instrumented run can take), and no wait is
					// longer than the window and the grace.
					if w.Started < w.Enqueued/4 {
						t.Errorf("%s: interactive started %d of %d", name, w.Started, w.Enqueued)
					}
					if w.P99 <= 0 || w.Max > window+2*time.Second {
						t.Errorf("%s: interactive p99 %v, max %v: not sane for a %v window", name, w.P99, w.Max, window)
					}
				}
			}
			if s.QuietTasks > 0 {
				// Alone, the quiet tenant's 100 tasks all start.
				if w := r.Idle.Quiet; w.Started != s.QuietTasks || w.Censored {
					t.Errorf("idle: quiet tenant started %d of %d", w.Started, s.QuietTasks)
				}
				if w := r.Load.Quiet; w.Enqueued != s.QuietTasks {
					t.Errorf("load: quiet tenant enqueued %d of %d", w.Enqueued, s.QuietTasks)
				}
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	ms := time.Millisecond
	ds := []time.Duration{1 * ms, 2 * ms, 3 * ms, 4 * ms, 5 * ms, 6 * ms, 7 * ms, 8 * ms, 9 * ms, 10 * ms}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5 * ms}, {0.99, 10 * ms}, {0.1, 1 * ms}, {1, 10 * ms}} {
		if got := Percentile(ds, c.q); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("Percentile of nothing is not 0")
	}
}

func TestFigures(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	recs := []record{
		{group: gBatch, enq: t0, start: at(100), end: at(300)},
		{group: gBatch, enq: t0, start: at(900), end: at(1100)}, // runs past the window
		{group: gInteractive, enq: at(10), start: at(20), end: at(40)},
	}
	t1 := at(1000)
	started, gap, sh := batchFigures(recs, 5, t0, t1, 2)
	if started != 2 {
		t.Errorf("started %d, want 2", started)
	}
	if gap != 800*time.Millisecond {
		t.Errorf("gap %v, want 800ms", gap)
	}
	if want := (0.2 + 0.1) / 2; sh < want-1e-9 || sh > want+1e-9 {
		t.Errorf("share %v, want %v", sh, want)
	}
	// An unstarted interactive task counts with its wait so far.
	w := waits(recs, gInteractive, []time.Time{at(10), at(500)}, t1)
	if !w.Censored || w.Started != 1 || w.Max != 500*time.Millisecond || w.P50 != 10*time.Millisecond {
		t.Errorf("waits = %+v", w)
	}
	if _, err := Run(context.Background(), "", Scenario{Name: "bad", BatchTasks: -1}, nil); err == nil {
		t.Error("a negative backlog was accepted")
	}
}
