// Package pgerr classifies pgx errors for the PostgreSQL broker
// (adapters/postgres) and the PostgreSQL ledger (ledger/postgres), which
// meet the same server errors and the same connection failures.
package pgerr

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-dev/switchyard/broker"
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
	"53":    broker.Transient, // insufficient resources (disk full, too many connections)
	"58":    broker.Transient, // system error
	"22":    broker.Permanent, // data exception
	"23":    broker.Permanent, // integrity constraint violation
	"28":    broker.Permanent, // invalid authorization
	"42":    broker.Permanent, // syntax error or access rule violation (42P01: the schema was dropped)
	"0A":    broker.Permanent, // feature not supported
}

// Classify wraps err for op. Already classified errors pass through;
// context errors stay recognisable and are transient; a closed pool is
// broker.ErrClosed; data and constraint errors (SQLSTATE classes 22 and
// 23) are permanent broker.ErrInvalid. A write that failed after its
// request may have reached the server, for a reason other than a server
// error (a connection dropped mid-statement), is broker.UnknownOutcome.
func Classify(op string, err error, write bool) error {
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
	if IsClosedPool(err) {
		return broker.ClosedError(op)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23") {
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
	var ce *pgconn.ConnectError
	if write && !pgconn.SafeToRetry(err) && !errors.As(err, &ce) {
		return broker.Wrap(op, broker.UnknownOutcome, err)
	}
	return broker.Wrap(op, broker.Transient, err)
}

// IsClosedPool reports the error of a pgxpool used after Close.
func IsClosedPool(err error) bool {
	s := err.Error()
	return s == "closed pool" || strings.HasSuffix(s, ": closed pool")
}

// IsCode reports a server error with SQLSTATE code.
func IsCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}
