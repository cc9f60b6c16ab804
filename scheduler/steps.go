package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

type runKey struct{}

// runState is what Step and Effect need from the running task.
type runState struct {
	s       *Scheduler
	task    string
	tenant  string
	attempt int
	sandbox bool // Job.Sandbox: effects are recorded, not performed

	mu       sync.Mutex
	inflight map[string]chan struct{} // effect keys this run is performing now

	// result and hasResult: the last SetResult (results.go).
	result    []byte
	hasResult bool
}

// claimKey marks an effect key as being performed by this run, waiting
// while another call of the same run performs it. The returned function
// ends the claim.
func (rs *runState) claimKey(ctx context.Context, key string) (func(), error) {
	for {
		rs.mu.Lock()
		ch, busy := rs.inflight[key]
		if !busy {
			if rs.inflight == nil {
				rs.inflight = map[string]chan struct{}{}
			}
			ch = make(chan struct{})
			rs.inflight[key] = ch
			rs.mu.Unlock()
			return func() {
				rs.mu.Lock()
				delete(rs.inflight, key)
				rs.mu.Unlock()
				close(ch)
			}, nil
		}
		rs.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ErrSuperseded is returned by Effect when the run calling it no longer
// holds its task in the ledger (a newer attempt took it over after this
// run's lease ran out, or an operator moved it): the run must stop, and
// touches nothing.
var ErrSuperseded = errors.New("scheduler: this attempt no longer holds the task")

func stateOf(ctx context.Context) *runState {
	rs, _ := ctx.Value(runKey{}).(*runState)
	return rs
}

// SandboxTask reports whether ctx is the context of a handler running a
// sandbox replay (Job.Sandbox), and that task's ID. Client.Enqueue uses it
// so that tasks enqueued by a sandboxed handler are sandboxed too.
func SandboxTask(ctx context.Context) (taskID string, ok bool) {
	rs := stateOf(ctx)
	if rs == nil || !rs.sandbox {
		return "", false
	}
	return rs.task, true
}

// ErrNotInTask is returned by Step and Effect called outside a handler.
var ErrNotInTask = errors.New("scheduler: Step and Effect must be called with the handler's context")

// ErrEffectUnknown is the permanent error Effect returns for an effect whose
// outcome is unknown (the worker died between doing it and recording it)
// when no reconcile function can tell whether it happened. The task is
// dead-lettered for a person to decide, never silently repeated.
var ErrEffectUnknown = errors.New("scheduler: effect outcome unknown and no reconcile function")

// Step runs fn once per task: when a step of this name already completed
// (in an earlier attempt, or an earlier delivery of the same task), its
// stored output is returned and fn is not called — a retry does not call
// the model again. Without a ledger, fn always runs.
func Step(ctx context.Context, name string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	rs := stateOf(ctx)
	if rs == nil {
		return nil, ErrNotInTask
	}
	L := rs.s.cfg.Ledger
	if L == nil {
		if err := rs.fault(ctx, name, ""); err != nil {
			return nil, err
		}
		return fn(ctx)
	}
	out, ok, err := L.GetStep(ctx, rs.task, name)
	if err != nil {
		return nil, fmt.Errorf("step %s: %w", name, err)
	}
	if ok {
		return out, nil
	}
	if err := rs.fault(ctx, name, ""); err != nil {
		return nil, err
	}
	out, err = fn(ctx)
	if err != nil {
		return nil, err
	}
	stored, err := L.PutStep(ctx, rs.task, name, out)
	if err != nil {
		// The output exists but is not recorded: retrying recomputes it,
		// which is the best that can be done.
		return nil, fmt.Errorf("step %s: recording output: %w", name, err)
	}
	return stored, nil
}

// EffectOpts tune Effect.
type EffectOpts struct {
	// Reconcile, when set, is asked whether an effect whose outcome is
	// unknown actually happened (by looking at the other system: did the
	// email go out, does the charge exist?). It returns done=true with the
	// effect's result if it happened. Without it, an unknown effect stops
	// the task with ErrEffectUnknown.
	Reconcile func(ctx context.Context) (done bool, result []byte, err error)
}

// Effect performs a side effect at most once per task once confirmed: it
// records the effect as pending, calls do, and records it as confirmed with
// do's result. A later attempt finds it confirmed and returns the stored
// result without calling do. An effect left pending by an earlier attempt
// (the worker died between doing and recording) is unknown: it goes through
// opts.Reconcile before anything can repeat it. If do returns an error, the
// effect is recorded as failed (not done) and may be tried again — unless
// the error is UnknownOutcome or a context error (a timeout or cancellation
// may have cut it off after it happened), which leave it unknown.
//
// Without a ledger, do always runs.
//
// In a sandbox replay (Job.Sandbox), do never runs: the effect is recorded
// as ledger.EffectWouldDo for the attempt that reached it, and Effect
// returns a nil result and a nil error (without a ledger it records
// nothing and returns the same).
func Effect(ctx context.Context, key string, do func(ctx context.Context) ([]byte, error), opts *EffectOpts) ([]byte, error) {
	rs := stateOf(ctx)
	if rs == nil {
		return nil, ErrNotInTask
	}
	if rs.sandbox {
		return sandboxEffect(ctx, rs, key)
	}
	L := rs.s.cfg.Ledger
	if L == nil {
		if err := rs.fault(ctx, "", key); err != nil {
			return nil, err
		}
		return do(ctx)
	}
	// Two calls of one run with the same key: the second waits for the
	// first, then finds its record (a live effect is never "unknown").
	done, err := rs.claimKey(ctx, key)
	if err != nil {
		return nil, err
	}
	defer done()
	e, begun, err := L.BeginEffect(ctx, rs.task, key, rs.attempt)
	if err != nil {
		return nil, fmt.Errorf("effect %s: %w", key, err)
	}
	if !begun {
		switch e.State {
		case ledger.EffectConfirmed:
			return e.Result, nil
		case ledger.EffectFailed:
			// Known not done: take it for this attempt and do it.
			if err := L.SetEffect(ctx, rs.task, key, ledger.EffectPending, nil); err != nil {
				return nil, fmt.Errorf("effect %s: %w", key, err)
			}
		case ledger.EffectPending, ledger.EffectUnknown:
			if e.State == ledger.EffectPending && e.Attempt != rs.attempt {
				// Left pending by another attempt. It is unknown only if
				// that attempt is gone: this run must hold the task (the
				// ledger hands a task to a new attempt only once the old
				// holder's lease has passed). A newer attempt, or a task
				// no longer running as ours, means this run is the stale
				// one: stop, and never reconcile over a live holder.
				t, err := L.Get(ctx, rs.task)
				if err != nil {
					return nil, fmt.Errorf("effect %s: %w", key, err)
				}
				if e.Attempt > rs.attempt || t.State != ledger.Running || t.Attempt != rs.attempt {
					return nil, fmt.Errorf("effect %s (begun by attempt %d; the task is %s at attempt %d, this is attempt %d): %w",
						key, e.Attempt, t.State, t.Attempt, rs.attempt, ErrSuperseded)
				}
			}
			if e.State == ledger.EffectPending {
				_ = L.SetEffect(ctx, rs.task, key, ledger.EffectUnknown, nil)
			}
			if opts == nil || opts.Reconcile == nil {
				return nil, Permanent(fmt.Errorf("effect %s: %w", key, ErrEffectUnknown))
			}
			done, result, err := opts.Reconcile(ctx)
			if err != nil {
				return nil, UnknownOutcome(fmt.Errorf("effect %s: reconcile: %w", key, err))
			}
			if done {
				if err := L.SetEffect(ctx, rs.task, key, ledger.EffectConfirmed, result); err != nil {
					return nil, fmt.Errorf("effect %s: %w", key, err)
				}
				return result, nil
			}
			if err := L.SetEffect(ctx, rs.task, key, ledger.EffectPending, nil); err != nil {
				return nil, fmt.Errorf("effect %s: %w", key, err)
			}
		}
	}
	var result []byte
	if err = rs.fault(ctx, "", key); err == nil {
		result, err = do(ctx)
	}
	if err != nil {
		// Known not done only when the error says so plainly. A cancelled
		// or expired context (a timeout, a lost lease, a shutdown) may have
		// cut the effect off after it took place: unknown, so the next
		// attempt reconciles instead of repeating it.
		var r *resultError
		unknown := errors.As(err, &r) && r.kind == resultUnknown ||
			errors.Is(err, broker.ErrUnknownOutcome) || broker.IsContext(err) || ctx.Err() != nil
		if !unknown {
			_ = L.SetEffect(context.WithoutCancel(ctx), rs.task, key, ledger.EffectFailed, nil)
		} else {
			_ = L.SetEffect(context.WithoutCancel(ctx), rs.task, key, ledger.EffectUnknown, nil)
		}
		return nil, err
	}
	if err := L.SetEffect(context.WithoutCancel(ctx), rs.task, key, ledger.EffectConfirmed, result); err != nil {
		// Done but not recorded: the next attempt reconciles it.
		return nil, UnknownOutcome(fmt.Errorf("effect %s: recording confirmation: %w", key, err))
	}
	return result, nil
}

// FaultPoint is a Step or Effect about to call its function: what
// Config.Faults sees.
type FaultPoint struct {
	TaskID  string
	Attempt int
	Step    string // the step's name; "" for an effect
	Effect  string // the effect's key; "" for a step
}

// fault asks Config.Faults whether this step or effect should fail instead
// of calling its function.
func (rs *runState) fault(ctx context.Context, step, effect string) error {
	if rs.s.cfg.Faults == nil {
		return nil
	}
	return rs.s.cfg.Faults(ctx, FaultPoint{TaskID: rs.task, Attempt: rs.attempt, Step: step, Effect: effect})
}

// sandboxEffect records key as would_do instead of performing it.
func sandboxEffect(ctx context.Context, rs *runState, key string) ([]byte, error) {
	L := rs.s.cfg.Ledger
	if L == nil {
		rs.s.cfg.Logger.Debug("switchyard: sandbox effect not performed (no ledger to record it)", "task", rs.task, "effect", key)
		return nil, nil
	}
	e, begun, err := L.BeginEffect(ctx, rs.task, key, rs.attempt)
	if err != nil {
		return nil, fmt.Errorf("effect %s: %w", key, err)
	}
	switch {
	case !begun && e.State == ledger.EffectWouldDo:
		return nil, nil
	case !begun && e.State == ledger.EffectConfirmed:
		// Recorded as done (not by this sandbox run): report it, do nothing.
		return e.Result, nil
	}
	// Begun now, or left pending by an attempt that stopped before
	// recording would_do.
	if err := L.SetEffect(ctx, rs.task, key, ledger.EffectWouldDo, nil); err != nil {
		return nil, fmt.Errorf("effect %s: recording would_do: %w", key, err)
	}
	return nil, nil
}
