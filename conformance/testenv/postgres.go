package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresLedgerDSN returns a ledger DSN on the test PostgreSQL with a fresh
// schema of its own (created by the ledger on open), dropped when the test
// ends. It skips or fails like Endpoint when PostgreSQL is unavailable.
func PostgresLedgerDSN(t testing.TB) string {
	t.Helper()
	dsn := Postgres.Endpoint(t)
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
