// Package pgtest gives tests a PostgreSQL ledger DSN with a schema of its
// own. It is apart from testenv because it needs pgx to drop the schema,
// and testenv is imported by the tests of every adapter: there, pgx would
// enter the go.sum of every user of any adapter.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// LedgerDSN returns a ledger DSN on the test PostgreSQL with a fresh
// schema of its own (created by the ledger on open), dropped when the test
// ends. It skips or fails like Endpoint when PostgreSQL is unavailable.
func LedgerDSN(t testing.TB) string {
	t.Helper()
	dsn := testenv.Postgres.Endpoint(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "sy_test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "schema=" + schema
}
