package postgres

import "github.com/switchyard-dev/switchyard/internal/pgerr"

// classify wraps err for op (internal/pgerr, shared with the PostgreSQL
// ledger).
func classify(op string, err error, write bool) error { return pgerr.Classify(op, err, write) }
