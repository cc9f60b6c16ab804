package scheduler

import (
	"context"
	"fmt"

	"github.com/switchyard-dev/switchyard/broker"
)

// A handler's result is the []byte it returns (HandlerFunc), or, when it
// returns nil, the last value given to SetResult. It is stored with the
// task in the ledger when the task completes (ledger.Task.Result, sealed
// by the codec when there is one) and kept as long as the task record
// (Config.Retention). Config.MaxResultBytes bounds it.

// DefaultMaxResultBytes is Config.MaxResultBytes's default.
const DefaultMaxResultBytes = 1 << 20

// ResultTooLargeError refuses a result above Config.MaxResultBytes. It
// matches broker.ErrInvalid and is permanent.
type ResultTooLargeError struct {
	TaskID string
	Size   int
	Limit  int
}

func (e *ResultTooLargeError) Error() string {
	return fmt.Sprintf("scheduler: the result of task %s is %d bytes, above the limit of %d (Config.MaxResultBytes)", e.TaskID, e.Size, e.Limit)
}

// Is makes errors.Is(err, broker.ErrInvalid) and broker.ErrPermanent true.
func (e *ResultTooLargeError) Is(target error) bool {
	return target == broker.ErrInvalid || target == broker.ErrPermanent
}

// SetResult records b as the result of the task whose handler ctx
// belongs to (replacing an earlier SetResult); it is stored when the task
// completes, unless the handler returns a result of its own. A result
// above Config.MaxResultBytes is refused (*ResultTooLargeError) and the
// earlier one kept. Outside a handler it returns ErrNotInTask.
func SetResult(ctx context.Context, b []byte) error {
	rs := stateOf(ctx)
	if rs == nil {
		return ErrNotInTask
	}
	if err := rs.s.checkResult(rs.task, b); err != nil {
		return err
	}
	rs.mu.Lock()
	rs.result = append([]byte(nil), b...)
	rs.hasResult = true
	rs.mu.Unlock()
	return nil
}

// checkResult applies Config.MaxResultBytes.
func (s *Scheduler) checkResult(id string, b []byte) error {
	if len(b) > s.cfg.MaxResultBytes {
		return &ResultTooLargeError{TaskID: id, Size: len(b), Limit: s.cfg.MaxResultBytes}
	}
	return nil
}

// resultOf is the result to store for a run whose handler returned
// returned without error.
func (rs *runState) resultOf(returned []byte) []byte {
	if returned != nil {
		return returned
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.hasResult {
		return rs.result
	}
	return nil
}
