package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// codeClasses maps SQLSTATE codes, then their two-character classes, to
// error classes. Anything not listed is transient.
var codeClasses = map[string]broker.Class{
	"40001": broker.Transient, // serialization_failure
	"40P01": broker.Transient, // deadlock_detected
	"55P03": broker.Transient, // lock_not_available
	"57014": broker.Transient, // query_canceled
	"57P01": broker.Transient, // admin_shutdown
	"57P02": broker.Transient, // crash_shutdown
	"57P03": broker.Transient, // cannot_connect_now
	"3D000": broker.Permanent, // invalid_catalog_name: no such database
	"3F000": broker.Permanent, // invalid_schema_name
	"08":    broker.Transient, // connection exception
	"53":    broker.Transient, // insufficient resources
	"58":    broker.Transient, // system error
	"22":    broker.Permanent, // data exception
	"23":    broker.Permanent, // integrity constraint violation
	"28":    broker.Permanent, // invalid authorization
	"42":    broker.Permanent, // syntax error or access rule violation
	"0A":    broker.Permanent, // feature not supported
}

// classify wraps err for op. Already classified errors pass through;
// context errors stay recognisable and are transient. A write that failed
// after its request may have reached the server, for a reason other than a
// server error, is broker.UnknownOutcome.
func classify(op string, err error, write bool) error {
	if err == nil {
		return nil
	}
	var be *broker.Error
	if errors.As(err, &be) {
		return err
	}
	if broker.IsContext(err) {
		return broker.Wrap(op, broker.Transient, err)
	}
	if err.Error() == "closed pool" || strings.HasSuffix(err.Error(), ": closed pool") {
		return store.Closed(op)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23503":
			return store.NotFound(op, "task")
		case strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23"):
			return &broker.Error{Op: op, Class: broker.Permanent, Kind: broker.ErrInvalid, Err: err}
		}
		if c, ok := codeClasses[pe.Code]; ok {
			return broker.Wrap(op, c, err)
		}
		if len(pe.Code) >= 2 {
			if c, ok := codeClasses[pe.Code[:2]]; ok {
				return broker.Wrap(op, c, err)
			}
		}
		return broker.Wrap(op, broker.Transient, err)
	}
	if write && !pgconn.SafeToRetry(err) && !isConnectError(err) {
		return broker.Wrap(op, broker.UnknownOutcome, err)
	}
	return broker.Wrap(op, broker.Transient, err)
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// isFK reports a foreign-key violation (the task does not exist).
func isFK(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503"
}
