package sqlite

import (
	"database/sql"
	"errors"

	sqlite3 "modernc.org/sqlite"
	sqlite3lib "modernc.org/sqlite/lib"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// classes maps SQLite primary result codes to error classes. Codes not in
// the table are transient.
var classes = map[int]broker.Class{
	sqlite3lib.SQLITE_BUSY:       broker.Transient,
	sqlite3lib.SQLITE_LOCKED:     broker.Transient,
	sqlite3lib.SQLITE_NOMEM:      broker.Transient,
	sqlite3lib.SQLITE_IOERR:      broker.Transient,
	sqlite3lib.SQLITE_FULL:       broker.Transient,
	sqlite3lib.SQLITE_PROTOCOL:   broker.Transient,
	sqlite3lib.SQLITE_INTERRUPT:  broker.Transient,
	sqlite3lib.SQLITE_ERROR:      broker.Permanent, // SQL error: a bug or a schema mismatch
	sqlite3lib.SQLITE_PERM:       broker.Permanent,
	sqlite3lib.SQLITE_READONLY:   broker.Permanent,
	sqlite3lib.SQLITE_CORRUPT:    broker.Permanent,
	sqlite3lib.SQLITE_NOTADB:     broker.Permanent,
	sqlite3lib.SQLITE_CANTOPEN:   broker.Permanent,
	sqlite3lib.SQLITE_CONSTRAINT: broker.Permanent,
	sqlite3lib.SQLITE_MISMATCH:   broker.Permanent,
	sqlite3lib.SQLITE_TOOBIG:     broker.Permanent,
	sqlite3lib.SQLITE_RANGE:      broker.Permanent,
	sqlite3lib.SQLITE_AUTH:       broker.Permanent,
	sqlite3lib.SQLITE_SCHEMA:     broker.Transient,
}

// classify wraps err for op. Already classified errors pass through;
// context errors stay recognisable and are transient.
func (s *Store) classify(op string, err error) error {
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
	if errors.Is(err, sql.ErrConnDone) || (s.closed.Load() && err.Error() == "sql: database is closed") {
		return store.Closed(op)
	}
	var se *sqlite3.Error
	if errors.As(err, &se) {
		code := se.Code()
		switch code & 0xff {
		case sqlite3lib.SQLITE_NOTADB, sqlite3lib.SQLITE_CORRUPT:
			return &broker.Error{Op: op, Class: broker.Permanent, Kind: broker.ErrInvalid,
				Err: errors.New(s.path + " is not a SQLite database or is corrupt: " + err.Error())}
		case sqlite3lib.SQLITE_CANTOPEN:
			return &broker.Error{Op: op, Class: broker.Permanent,
				Err: errors.New("cannot open " + s.path + " (does its directory exist and is it writable?): " + err.Error())}
		case sqlite3lib.SQLITE_CONSTRAINT:
			if code == sqlite3lib.SQLITE_CONSTRAINT_FOREIGNKEY {
				return store.NotFound(op, "task")
			}
			return &broker.Error{Op: op, Class: broker.Permanent, Kind: broker.ErrInvalid, Err: err}
		}
		if c, ok := classes[code&0xff]; ok {
			return broker.Wrap(op, c, err)
		}
	}
	return broker.Wrap(op, broker.Transient, err)
}

// isFK reports a foreign-key violation (the task does not exist).
func isFK(err error) bool {
	var se *sqlite3.Error
	return errors.As(err, &se) && se.Code() == sqlite3lib.SQLITE_CONSTRAINT_FOREIGNKEY
}
