package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/broker"
)

// schemaVersion is the version of the broker's own tables (sy_meta); it
// is separate from the ledger's migrations.
const schemaVersion = 1

// migrations are the statements of each version, {s} standing for the
// quoted schema. Version 1:
//
//   - sy_queue: live messages, one row each. visible_at is when the row
//     may next be leased (run-at, nack delay or lease end); lease_token
//     guards every settle. Rows are deleted on ack, so the table holds the
//     backlog only. Autovacuum runs on a fixed number of dead tuples
//     (scale factor 0), not on a fraction of a table whose size swings.
//   - sy_dead: dead letters, with the dead-letter record.
//   - sy_dedup: idempotency keys within the window.
var migrations = map[int][]string{
	1: {
		`CREATE TABLE IF NOT EXISTS {s}.sy_queue (
			seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			lane         text NOT NULL,
			visible_at   timestamptz NOT NULL,
			lease_token  bigint NOT NULL DEFAULT 0,
			attempts     integer NOT NULL DEFAULT 0,
			id           text NOT NULL,
			kind         text NOT NULL,
			tenant       text NOT NULL DEFAULT '',
			idem_key     text NOT NULL DEFAULT '',
			ord_key      text NOT NULL DEFAULT '',
			run_at       bigint NOT NULL DEFAULT 0,
			enqueued_at  bigint NOT NULL DEFAULT 0,
			max_attempts integer NOT NULL DEFAULT 0,
			last_error   text,
			headers      bytea,
			body         bytea
		) WITH (fillfactor = 90,
			autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
			autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
			autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000,
			autovacuum_vacuum_cost_delay = 0)`,
		`CREATE INDEX IF NOT EXISTS sy_queue_ready ON {s}.sy_queue (lane, visible_at, seq)`,
		`CREATE INDEX IF NOT EXISTS sy_queue_order ON {s}.sy_queue (lane, ord_key, seq) WHERE ord_key <> ''`,
		`CREATE TABLE IF NOT EXISTS {s}.sy_dead (
			seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			lane         text NOT NULL,
			visible_at   timestamptz NOT NULL,
			lease_token  bigint NOT NULL DEFAULT 0,
			attempts     integer NOT NULL DEFAULT 0,
			id           text NOT NULL,
			kind         text NOT NULL,
			tenant       text NOT NULL DEFAULT '',
			idem_key     text NOT NULL DEFAULT '',
			ord_key      text NOT NULL DEFAULT '',
			run_at       bigint NOT NULL DEFAULT 0,
			enqueued_at  bigint NOT NULL DEFAULT 0,
			max_attempts integer NOT NULL DEFAULT 0,
			headers      bytea,
			body         bytea,
			dead_letter  bytea,
			dead_at      timestamptz NOT NULL DEFAULT now()
		)`,
		`CREATE INDEX IF NOT EXISTS sy_dead_lane ON {s}.sy_dead (lane, seq)`,
		`CREATE TABLE IF NOT EXISTS {s}.sy_dedup (
			lane       text NOT NULL,
			tenant     text NOT NULL,
			key        text NOT NULL,
			id         text NOT NULL,
			expires_at timestamptz NOT NULL,
			PRIMARY KEY (lane, tenant, key)
		) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000)`,
		`CREATE INDEX IF NOT EXISTS sy_dedup_expires ON {s}.sy_dedup (expires_at)`,
	},
}

// sqlFor replaces {s} by the quoted schema.
func sqlFor(schema, q string) string {
	return strings.ReplaceAll(q, "{s}", pgx.Identifier{schema}.Sanitize())
}

// channelFor is the LISTEN/NOTIFY channel of a schema: one per schema, so
// that brokers on other schemas of the database are never woken. The
// payload is the lane.
func channelFor(schema string) string {
	h := fnv.New64a()
	h.Write([]byte(schema))
	return "switchyard_broker_" + strconv.FormatUint(h.Sum64(), 16)
}

var errNoSchema = errors.New("no such broker schema")

// migrate creates or checks the broker's schema under an advisory lock, so
// that processes opening a new schema at once create it once. With
// mustExist a missing schema (or one without the broker's tables) is
// refused.
func (d *Driver) migrate(ctx context.Context) error {
	const op = "postgres broker: open"
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "switchyard-broker:"+d.cfg.Schema); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, d.cfg.Schema+".sy_meta").Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if d.cfg.MustExist {
				return &broker.Error{Op: op, Class: broker.Permanent, Kind: broker.ErrInvalid,
					Err: fmt.Errorf("%w: %s (create=false refuses to create it)", errNoSchema, d.cfg.Schema)}
			}
			if _, err := tx.Exec(ctx, sqlFor(d.cfg.Schema, `CREATE SCHEMA IF NOT EXISTS {s}`)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, sqlFor(d.cfg.Schema, `CREATE TABLE {s}.sy_meta (key text PRIMARY KEY, value text NOT NULL)`)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, sqlFor(d.cfg.Schema, `INSERT INTO {s}.sy_meta (key, value) VALUES ('schema_version', '0')`)); err != nil {
				return err
			}
		}
		var v string
		if err := tx.QueryRow(ctx, sqlFor(d.cfg.Schema, `SELECT value FROM {s}.sy_meta WHERE key = 'schema_version'`)).Scan(&v); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return broker.Invalidf("postgres broker: schema %s has sy_meta without a schema_version: not a Switchyard broker schema", d.cfg.Schema)
			}
			return err
		}
		have, err := strconv.Atoi(v)
		if err != nil || have < 0 {
			return broker.Invalidf("postgres broker: schema %s records version %q, not a Switchyard broker schema", d.cfg.Schema, v)
		}
		if have > schemaVersion {
			return broker.Invalidf("postgres broker: schema %s is at version %d; this build knows up to %d", d.cfg.Schema, have, schemaVersion)
		}
		for ver := have + 1; ver <= schemaVersion; ver++ {
			for _, s := range migrations[ver] {
				if _, err := tx.Exec(ctx, sqlFor(d.cfg.Schema, s)); err != nil {
					return fmt.Errorf("broker schema version %d: %w", ver, err)
				}
			}
			if _, err := tx.Exec(ctx, sqlFor(d.cfg.Schema, `UPDATE {s}.sy_meta SET value = $1 WHERE key = 'schema_version'`), strconv.Itoa(ver)); err != nil {
				return err
			}
		}
		return nil
	})
	return classify(op, err, false)
}
