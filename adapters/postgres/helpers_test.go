package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/internal/faultproxy"
)

// sharedDSN is the machine's PostgreSQL (skips or fails with the reason
// when there is none).
func sharedDSN(t testing.TB) string {
	t.Helper()
	return testenv.Postgres.Endpoint(t)
}

// freshSchema is a new schema name, dropped when the test ends.
func freshSchema(t testing.TB, dsn string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "sy_btest_" + hex.EncodeToString(b)
	t.Cleanup(func() { dropSchema(dsn, schema) })
	return schema
}

// dropSchema removes a test schema (best effort).
func dropSchema(dsn, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
}

// withParams adds query parameters to a DSN.
func withParams(dsn string, params string) string {
	if params == "" {
		return dsn
	}
	if strings.Contains(dsn, "?") {
		return dsn + "&" + params
	}
	return dsn + "?" + params
}

// testURL is a broker URL on the shared server with a fresh schema.
func testURL(t testing.TB, params string) string {
	t.Helper()
	dsn := sharedDSN(t)
	return withParams(dsn, "schema="+freshSchema(t, dsn)+optParams(params))
}

func optParams(p string) string {
	if p == "" {
		return ""
	}
	return "&" + p
}

// openBroker opens a Broker on rawURL, closed at the end of the test.
func openBroker(t testing.TB, rawURL string, opts *broker.Options) *broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, rawURL, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func driverOf(b *broker.Broker) *Driver { return b.Driver().(*Driver) }

// injectURL writes a row to the lane's queue with plain SQL, as a foreign
// writer (or corruption) would: headers that are not JSON, no kind.
func injectURL(ctx context.Context, rawURL, lane string, body []byte) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	c, err := parseURL(u)
	if err != nil {
		return err
	}
	return insertRaw(ctx, c.DSN, c.Schema, lane, broker.NewID(), "", body, body, 0, 0)
}

// insertRaw inserts a queue row with the given columns, behind the
// driver's back, and notifies the lane.
func insertRaw(ctx context.Context, dsn, schema, lane, id, kind string, headers, body []byte, maxAttempts, attempts int32) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sqlFor(schema, `INSERT INTO {s}.sy_queue (lane, visible_at, id, kind, headers, body, enqueued_at, max_attempts, attempts)
		VALUES ($1, statement_timestamp(), $2, $3, $4, $5, 0, $6, $7)`), lane, id, kind, headers, body, maxAttempts, attempts)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `SELECT pg_notify($1, $2)`, channelFor(schema), lane)
	return err
}

// viaProxy rewrites dsn's host to the proxy's address.
func viaProxy(t testing.TB, dsn string, p *faultproxy.Proxy) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr
	return u.String()
}
