package scaling

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The simulation: a deterministic model (fixed seed, fixed 100 ms steps)
// of two lanes, each served by its own fleet (a Deployment per lane, as
// with one KEDA ScaledObject per lane) of 4-slot workers that take 20 s
// to start. An autoscaler polls every 10 s and asks for workers by one of
// two rules:
//
//   - signal: Compute's Desired, from arrival rate (and its trend), p90
//     duration, depth, oldest age and the lane's objective;
//   - depth:  ceil((ready + in flight) / target) workers, KEDA's SQS
//     scaler rule (scaleOnInFlight), for several targets.
//
// It scales in by removing idle workers only, down to the rule's number
// (at least one). The load: interactive tasks (0.5–1.5 s, wait objective
// 2 s) at 1/s, ramping to 15/s over two minutes for peak hours and back;
// batch tasks (10–30 s, no objective) dumped 300 at a time at 60 s and
// 400 s. Each run reports the interactive p99 and max wait, the share of
// interactive tasks later than the objective, when the batch work was
// all done, and the worker-seconds both fleets cost (starting included).

const (
	simStep      = 100 * time.Millisecond
	simEnd       = 900 * time.Second
	simStartup   = 20 * time.Second
	simPoll      = 10 * time.Second
	simSlots     = 4
	simObjective = 2 * time.Second
	simWindow    = 30 * time.Second
)

type simTask struct {
	arrive, dur time.Duration
}

type simWorker struct {
	readyAt time.Duration
	busy    []time.Duration // end times of running tasks
}

type simLane struct {
	name      string
	objective time.Duration
	tasks     []simTask // by arrival
	next      int       // next task to arrive
	queue     []simTask // arrived, not started
	workers   []*simWorker
	durs      []time.Duration // finished durations, last 200
	arrivals  []time.Duration // arrival times within 2×window
	waits     []time.Duration
	lastDone  time.Duration
	done      int
	workerSec float64
}

type simResult struct {
	rule                 string
	p99, maxWait         time.Duration
	late                 float64 // share of interactive tasks past the objective
	batchDone            time.Duration
	workerSec            float64
	peakI, peakB         int
	interactiveWorkerSec float64
}

func simLoad() (interactive, batch []simTask) {
	r := rand.New(rand.NewPCG(23, 2026))
	rate := func(t float64) float64 {
		switch {
		case t < 120:
			return 1
		case t < 240:
			return 1 + 14*(t-120)/120
		case t < 480:
			return 15
		case t < 600:
			return 15 - 14*(t-480)/120
		}
		return 1
	}
	// Poisson arrivals by thinning at the peak rate.
	for t := 0.0; ; {
		t += r.ExpFloat64() / 15
		if t >= 800 {
			break
		}
		if r.Float64() < rate(t)/15 {
			interactive = append(interactive, simTask{arrive: secs(t), dur: secs(0.5 + r.Float64())})
		}
	}
	for _, at := range []float64{60, 400} {
		for range 300 {
			batch = append(batch, simTask{arrive: secs(at), dur: secs(10 + 20*r.Float64())})
		}
	}
	return interactive, batch
}

func secs(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// simulate runs the model; rule returns the workers wanted for a lane.
func simulate(name string, rule func(l *simLane, now time.Duration) int) simResult {
	it, bt := simLoad()
	lanes := []*simLane{{name: "interactive", objective: simObjective, tasks: it}, {name: "batch", tasks: bt}}
	res := simResult{rule: name}
	for _, l := range lanes {
		l.workers = []*simWorker{{}} // one warm worker each
	}
	for now := time.Duration(0); now < simEnd; now += simStep {
		for _, l := range lanes {
			// Finish, arrive, start.
			for _, w := range l.workers {
				w.busy = slices.DeleteFunc(w.busy, func(end time.Duration) bool {
					if end <= now {
						l.done++
						l.lastDone = end
						return true
					}
					return false
				})
			}
			for l.next < len(l.tasks) && l.tasks[l.next].arrive <= now {
				l.queue = append(l.queue, l.tasks[l.next])
				l.arrivals = append(l.arrivals, l.tasks[l.next].arrive)
				l.next++
			}
			for _, w := range l.workers {
				for w.readyAt <= now && len(w.busy) < simSlots && len(l.queue) > 0 {
					t := l.queue[0]
					l.queue = l.queue[1:]
					w.busy = append(w.busy, now+t.dur)
					l.waits = append(l.waits, now-t.arrive)
					l.durs = append(l.durs, t.dur)
					if len(l.durs) > 200 {
						l.durs = l.durs[1:]
					}
				}
			}
			l.workerSec += float64(len(l.workers)) * simStep.Seconds()
			// Scale.
			if now%simPoll == 0 {
				l.arrivals = slices.DeleteFunc(l.arrivals, func(a time.Duration) bool { return a < now-2*simWindow })
				want := max(rule(l, now), 1)
				if n := len(l.workers); want > n {
					for range want - n {
						l.workers = append(l.workers, &simWorker{readyAt: now + simStartup})
					}
				} else if want < n {
					excess := n - want
					l.workers = slices.DeleteFunc(l.workers, func(w *simWorker) bool {
						if excess > 0 && len(w.busy) == 0 && w.readyAt <= now {
							excess--
							return true
						}
						return false
					})
				}
				if l.name == "interactive" {
					res.peakI = max(res.peakI, len(l.workers))
				} else {
					res.peakB = max(res.peakB, len(l.workers))
				}
			}
		}
	}
	i, b := lanes[0], lanes[1]
	w := slices.Clone(i.waits)
	slices.Sort(w)
	res.p99 = w[len(w)*99/100]
	res.maxWait = w[len(w)-1]
	late := 0
	for _, x := range w {
		if x > simObjective {
			late++
		}
	}
	res.late = float64(late) / float64(len(w))
	res.batchDone = -1
	if b.done == len(b.tasks) {
		res.batchDone = b.lastDone
	}
	if i.done != len(i.tasks) {
		res.p99 = simEnd // unfinished work: never within the objective
	}
	res.interactiveWorkerSec = i.workerSec
	res.workerSec = i.workerSec + b.workerSec
	return res
}

// measure builds Compute's input from the model, as the Meter does from a
// running system: arrival rate over the last window and its trend against
// the window before, p90 of recent durations, depth, busy, oldest age.
func measure(l *simLane, now time.Duration) Input {
	var bins [6]int // 10 s bins, newest first
	for _, a := range l.arrivals {
		if i := int((now - a) / (simWindow / 3)); i >= 0 && i < len(bins) {
			bins[i]++
		}
	}
	in := Input{Lane: l.name, Objective: l.objective, Ready: int64(len(l.queue))}
	w := (simWindow / 3).Seconds()
	in.ArrivalRate, in.Trend = RateAndTrend([3]float64{float64(bins[0]) / w, float64(bins[1]) / w, float64(bins[2]) / w},
		[3]float64{float64(bins[3]) / w, float64(bins[4]) / w, float64(bins[5]) / w}, simWindow)
	if len(l.durs) > 0 {
		d := slices.Clone(l.durs)
		slices.Sort(d)
		in.P90 = d[len(d)*9/10]
	}
	for _, w := range l.workers {
		in.Busy += int64(len(w.busy))
	}
	if len(l.queue) > 0 {
		in.OldestReady = now - l.queue[0].arrive
	}
	return in
}

func signalRule(l *simLane, now time.Duration) int {
	return Compute(measure(l, now), Policy{Lead: simStartup, SlotsPerWorker: simSlots}).Workers
}

func depthRule(target int) func(l *simLane, now time.Duration) int {
	return func(l *simLane, now time.Duration) int {
		in := measure(l, now)
		return int(math.Ceil(float64(in.Ready+in.Busy) / float64(target)))
	}
}

func TestSimulation_SignalBeatsDepth(t *testing.T) {
	sig := simulate("signal", signalRule)
	results := []simResult{sig}
	for _, target := range []int{1, 2, 4, 8, 16} {
		results = append(results, simulate(fmt.Sprintf("depth, target %d", target), depthRule(target)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| rule | interactive p99 wait | max wait | late (> %s) | batch all done at | peak workers (interactive / batch) | worker-seconds (interactive) | worker-seconds (total) |\n|---|---|---|---|---|---|---|---|\n", simObjective)
	for _, r := range results {
		done := "never"
		if r.batchDone >= 0 {
			done = r.batchDone.Round(time.Second).String()
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.1f %% | %s | %d / %d | %.0f | %.0f |\n", r.rule, r.p99.Round(time.Millisecond), r.maxWait.Round(time.Millisecond),
			100*r.late, done, r.peakI, r.peakB, r.interactiveWorkerSec, r.workerSec)
	}
	t.Logf("simulation (go test -run TestSimulation -v ./scaling/):\n%s", b.String())

	if sig.p99 > simObjective {
		t.Errorf("signal: interactive p99 wait %s exceeds the objective %s", sig.p99, simObjective)
	}
	if sig.batchDone < 0 {
		t.Errorf("signal: the batch work never finished")
	}
	within := 0
	for _, r := range results[1:] {
		if r.p99 <= simObjective && r.batchDone >= 0 {
			within++
			if r.workerSec <= sig.workerSec {
				t.Errorf("%s meets the objective with %.0f worker-seconds, no more than the signal's %.0f", r.rule, r.workerSec, sig.workerSec)
			}
		}
	}
	if within == len(results)-1 {
		t.Logf("every depth target met the objective; each cost more worker-seconds than the signal")
	}
}

// The simulation is deterministic: the same figures every run.
func TestSimulation_Deterministic(t *testing.T) {
	a, b := simulate("signal", signalRule), simulate("signal", signalRule)
	if a != b {
		t.Fatalf("two runs differ: %+v vs %+v", a, b)
	}
}
