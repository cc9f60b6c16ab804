// Package scaling computes, per lane, how many worker slots are busy and
// how many are wanted — the signal an autoscaler (KEDA, ECS target
// tracking, a script) scales a fleet by. It is pure and deterministic:
// callers measure, Compute decides.
//
// # The rule
//
// Depth alone is the wrong signal for agent work: 50 queued one-second
// model calls and 50 queued 20 ms lookups need very different fleets, and
// an interactive lane needs headroom before it is late. Compute therefore
// sizes a lane from what the work costs and when it is due:
//
//	load      R = λ' × p90                 slots busy in steady state (Little's law)
//	keep up   = R + β√R                    square-root staffing: headroom for bursts
//	catch up  = ready × p90 / H            slots that start the backlog within H
//	wanted    = ceil(keep up + catch up)   at least busy, at least the reserved floor
//
// λ' is the arrival rate extrapolated over Lead (a slot asked for now
// serves only after the fleet's start-up delay), p90 the lane's p90 task
// duration. β (Policy.Safety) is the headroom of the square-root staffing
// rule for many-server queues (Halfin–Whitt): the wait stays short with
// high probability while the spare slots grow only as the square root of
// the load. A lane with no wait objective gets none (β = 0): nobody waits
// on it. H is the time left before the oldest ready task is late — the
// lane's wait objective minus the oldest task's age — but never less than
// Lead (sooner, new workers cannot help) nor a tenth of the objective; or
// DrainHorizon for a lane with no objective (batch work: drain it
// steadily rather than all at once). With no duration measured yet, every
// ready or busy task is given a slot (depth scaling) until there is.
//
// Measure λ robustly (Meter does): a one-off dump of tasks is backlog,
// caught up over H, not a rate that goes on. Meter takes the median of the
// last three windows' rates, so a single spike does not count as one.
package scaling

import (
	"math"
	"time"
)

// Input is one lane's measurements.
type Input struct {
	Lane string
	// ArrivalRate is tasks per second arriving at the lane, over the recent
	// window. Trend is its change per second (tasks/s²), for the
	// extrapolation over Policy.Lead; 0 when unknown.
	ArrivalRate float64
	Trend       float64
	// P90 is the lane's p90 task duration; 0 when not yet measured.
	P90 time.Duration
	// Ready is the lane's depth: tasks ready to start.
	Ready int64
	// Busy is the slots running the lane's tasks now (the broker's
	// in-flight count, or the fleet registry's busy slots).
	Busy int64
	// OldestReady is how long the oldest ready task has waited.
	OldestReady time.Duration
	// Objective is the lane's wait objective (lanes.Lane.WaitObjective);
	// 0 means none.
	Objective time.Duration
	// Reserved is a floor of slots the lane keeps whatever its load (its
	// reserved slots across the minimum fleet, or a Lambda mapping's
	// reserved concurrency). Defaults to 0.
	Reserved int
	// Slots is the fleet's current slots serving the lane (live servers ×
	// their slots), for the report; 0 when unknown.
	Slots int
}

// Policy tunes Compute. The zero value is usable: every field has a
// default.
type Policy struct {
	// Lead is the fleet's start-up delay: how long a worker asked for now
	// takes to serve. Defaults to 0.
	Lead time.Duration
	// DrainHorizon is how soon a lane without a wait objective should have
	// started its backlog. Defaults to 10 minutes.
	DrainHorizon time.Duration
	// Safety is β, the square-root staffing headroom for lanes with a
	// wait objective. Defaults to 1; negative means none.
	Safety float64
	// SlotsPerWorker converts slots to workers in Signal.Workers. Defaults
	// to 1.
	SlotsPerWorker int
	// Max caps the wanted slots of one lane. Defaults to 100,000.
	Max int
}

func (p Policy) withDefaults() Policy {
	if p.DrainHorizon <= 0 {
		p.DrainHorizon = 10 * time.Minute
	}
	if p.SlotsPerWorker <= 0 {
		p.SlotsPerWorker = 1
	}
	if p.Safety == 0 {
		p.Safety = 1
	}
	if p.Safety < 0 {
		p.Safety = 0
	}
	if p.Max <= 0 {
		p.Max = 100000
	}
	return p
}

// Signal is one lane's scaling signal. It is what GET /api/v1/scaling and
// `switchyard scale --json` print.
type Signal struct {
	Lane string `json:"lane"`
	// Busy is the slots running the lane's tasks now.
	Busy int64 `json:"busy"`
	// Desired is the slots the lane wants (the gauge
	// switchyard_lane_desired_slots).
	Desired int `json:"desired"`
	// Workers is Desired in workers of Policy.SlotsPerWorker slots.
	Workers int `json:"workers"`
	// Slots is the fleet's current slots serving the lane (0 unknown).
	Slots int `json:"slots"`
	// Ready, OldestReadyMS, ArrivalRate, P90MS and ObjectiveMS are the
	// inputs, for the record.
	Ready         int64   `json:"ready"`
	OldestReadyMS float64 `json:"oldest_ready_ms"`
	ArrivalRate   float64 `json:"arrival_rate"`
	P90MS         float64 `json:"p90_ms"`
	ObjectiveMS   float64 `json:"objective_ms"`
	// Late reports the oldest ready task past the objective.
	Late bool `json:"late"`
	// Reason says which term decided Desired: "keep_up", "catch_up",
	// "busy", "reserved", "depth" (no duration measured yet) or "idle".
	Reason string `json:"reason"`
}

// Compute returns in's signal under p.
func Compute(in Input, p Policy) Signal {
	p = p.withDefaults()
	s := Signal{Lane: in.Lane, Busy: max(in.Busy, 0), Slots: in.Slots, Ready: max(in.Ready, 0),
		OldestReadyMS: ms(in.OldestReady), ArrivalRate: math.Max(finite(in.ArrivalRate), 0), P90MS: ms(in.P90), ObjectiveMS: ms(in.Objective)}
	s.Late = in.Objective > 0 && in.OldestReady > in.Objective
	want, reason := 0.0, "idle"
	if in.P90 <= 0 {
		if d := float64(s.Ready + s.Busy); d > 0 {
			want, reason = d, "depth"
		}
	} else {
		p90 := in.P90.Seconds()
		rate := s.ArrivalRate + math.Max(finite(in.Trend), 0)*p.Lead.Seconds()
		load := rate * p90
		keep := load
		h := p.DrainHorizon
		if in.Objective > 0 {
			keep += p.Safety * math.Sqrt(load)
			h = max(in.Objective-max(in.OldestReady, 0), in.Objective/10, p.Lead)
		}
		catch := float64(s.Ready) * p90 / h.Seconds()
		want = keep + catch
		reason = "keep_up"
		if catch > keep {
			reason = "catch_up"
		}
		if want == 0 {
			reason = "idle"
		}
	}
	desired := int(math.Min(math.Ceil(want-1e-9), float64(p.Max)))
	if b := int(min(s.Busy, int64(p.Max))); b > desired {
		desired, reason = b, "busy"
	}
	if in.Reserved > desired {
		desired, reason = min(in.Reserved, p.Max), "reserved"
	}
	s.Desired = desired
	s.Workers = (desired + p.SlotsPerWorker - 1) / p.SlotsPerWorker
	s.Reason = reason
	return s
}

func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// RateAndTrend estimates a lane's arrival rate and its trend from the
// rates of the last three windows (cur) and the three before (prev), each
// window span/3 long: the rate is the median of cur, so one spike (a dump
// of tasks, which is backlog, not a rate) does not count; the trend is the
// change between the two medians over span.
func RateAndTrend(cur, prev [3]float64, span time.Duration) (rate, trend float64) {
	rate = median3(cur)
	if span > 0 {
		trend = (rate - median3(prev)) / span.Seconds()
	}
	return rate, trend
}

func median3(v [3]float64) float64 {
	a, b, c := finite(v[0]), finite(v[1]), finite(v[2])
	return max(min(a, b), min(max(a, b), c))
}
