package postgres

import (
	"errors"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/pgerr"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// classify wraps err for op with internal/pgerr's rules (shared with the
// PostgreSQL broker), in the ledger's terms: a closed pool is the ledger's
// ErrClosed and a foreign-key violation is a task that does not exist.
func classify(op string, err error, write bool) error {
	if err == nil {
		return nil
	}
	var be *broker.Error
	if errors.As(err, &be) {
		return err
	}
	switch {
	case broker.IsContext(err):
	case pgerr.IsClosedPool(err):
		return store.Closed(op)
	case isFK(err):
		return store.NotFound(op, "task")
	}
	return pgerr.Classify(op, err, write)
}

// isFK reports a foreign-key violation (the task does not exist).
func isFK(err error) bool { return pgerr.IsCode(err, "23503") }
