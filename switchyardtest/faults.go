package switchyardtest

import (
	"context"
	"fmt"
	"sync"

	"github.com/switchyard-dev/switchyard/scheduler"
)

// faults holds the failures a test asked for, each used once.
type faults struct {
	mu      sync.Mutex
	steps   map[string][]error
	effects map[string][]error
}

// check is the scheduler's Faults hook.
func (f *faults) check(_ context.Context, p scheduler.FaultPoint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, name := f.steps, p.Step
	if p.Effect != "" {
		m, name = f.effects, p.Effect
	}
	q := m[name]
	if len(q) == 0 {
		return nil
	}
	m[name] = q[1:]
	return q[0]
}

func (f *faults) add(m *map[string][]error, name string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *m == nil {
		*m = map[string][]error{}
	}
	(*m)[name] = append((*m)[name], err)
}

// FailStepOnce makes the next run of the step called name (in any task)
// return err instead of calling its function; the run after that calls the
// function as usual. A nil err becomes an error naming the step. The error
// is returned as the function's own would be: a plain error makes the
// handler's attempt retry by the retry policy, switchyard.Permanent(err)
// dead-letters the task. Calling it n times fails the next n runs.
func (e *Env) FailStepOnce(name string, err error) {
	if err == nil {
		err = fmt.Errorf("switchyardtest: injected failure of step %q", name)
	}
	e.faults.add(&e.faults.steps, name, err)
}

// FailEffectOnce makes the next run of the effect with this key (in any
// task) return err instead of calling its function. With a ledger, the
// effect is recorded as failed (known not done), so the retry performs it.
// A nil err becomes an error naming the effect.
func (e *Env) FailEffectOnce(key string, err error) {
	if err == nil {
		err = fmt.Errorf("switchyardtest: injected failure of effect %q", key)
	}
	e.faults.add(&e.faults.effects, key, err)
}
