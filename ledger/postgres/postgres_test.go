package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/ledgertest"
	"github.com/switchyard-dev/switchyard/ledger/postgres"
)

// freshSchema returns the server's DSN and a new schema name, dropped
// when the test ends.
func freshSchema(t testing.TB) (dsn, schema string) {
	t.Helper()
	dsn = testenv.Postgres.Endpoint(t)
	b := make([]byte, 6)
	rand.Read(b)
	schema = "ledgertest_" + hex.EncodeToString(b)
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
	return dsn, schema
}

func openFresh(t testing.TB, o *postgres.Options) *postgres.Store {
	t.Helper()
	dsn, schema := freshSchema(t)
	var opts postgres.Options
	if o != nil {
		opts = *o
	}
	opts.Schema = schema
	s, err := postgres.Open(context.Background(), dsn, &opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() }) // runs before the schema is dropped
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger { return openFresh(t, nil) })
}

func TestOpen_DSN(t *testing.T) {
	t.Parallel()
	dsn, schema := freshSchema(t)
	ctx := context.Background()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", schema)
	q.Set("dedup_window", "1h")
	q.Set("pool_max_conns", "3")
	q.Set("application_name", "ledgertest")
	u.RawQuery = q.Encode()
	for _, scheme := range []string{"postgres", "postgresql"} {
		u.Scheme = scheme
		l, err := ledger.Open(ctx, u.String())
		if err != nil {
			t.Fatalf("Open %s: %v", scheme, err)
		}
		s := l.(*postgres.Store)
		if got := s.Pool().Config().MaxConns; got != 3 {
			t.Errorf("pool_max_conns not passed to pgx: %d", got)
		}
		var sp string
		if err := s.Pool().QueryRow(ctx, `SHOW search_path`).Scan(&sp); err != nil || sp != schema {
			t.Errorf("search_path %q %v, want %q", sp, err, schema)
		}
		l.Close()
	}
	bad := func(mut func(q url.Values)) string {
		c := *u
		c.Scheme = "postgres"
		c.User = url.UserPassword("postgres", "hunter2")
		q := c.Query()
		mut(q)
		c.RawQuery = q.Encode()
		return c.String()
	}
	for name, dsn := range map[string]string{
		"unknown":      bad(func(q url.Values) { q.Set("bogus", "1") }),
		"search_path":  bad(func(q url.Values) { q.Set("search_path", "x") }),
		"bad schema":   bad(func(q url.Values) { q.Set("schema", "Robert'); DROP") }),
		"bad window":   bad(func(q url.Values) { q.Set("dedup_window", "soon") }),
		"zero window":  bad(func(q url.Values) { q.Set("dedup_window", "0s") }),
		"bad pool":     bad(func(q url.Values) { q.Set("pool_max_conns", "many") }),
		"twice schema": bad(func(q url.Values) { q["schema"] = []string{"a", "b"} }),
	} {
		_, err := ledger.Open(ctx, dsn)
		if !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("Open %s: %v, want ErrInvalid", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open %s leaked the password: %v", name, err)
		}
	}
}

// TestOpen_Unreachable: a server that is not there gives a transient
// error within the context's deadline, without the password.
func TestOpen_Unreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	// Port 1 on loopback: nothing listens there.
	_, err := ledger.Open(ctx, "postgres://postgres:hunter2@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	if !errors.Is(err, broker.ErrTransient) {
		t.Fatalf("Open of an unreachable server: %v, want ErrTransient", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the error leaked the password: %v", err)
	}
	if d := time.Since(start); d > 9*time.Second {
		t.Errorf("Open took %v", d)
	}
}

// TestOpen_Migrations: reopening applies nothing twice; concurrent opens
// of one new schema migrate it once; a newer schema is refused.
func TestOpen_Migrations(t *testing.T) {
	t.Parallel()
	dsn, schema := freshSchema(t)
	ctx := context.Background()
	errs := make(chan error, 4)
	stores := make(chan *postgres.Store, 4)
	for range 4 {
		go func() {
			s, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: schema})
			errs <- err
			stores <- s
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
		s := <-stores
		defer s.Close()
	}
	s, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v, err := s.SchemaVersion(ctx)
	if err != nil || v < 1 {
		t.Fatalf("schema version %d %v", v, err)
	}
	var n, distinct int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*), count(DISTINCT version) FROM ledger_schema_version`).Scan(&n, &distinct); err != nil || n != distinct {
		t.Fatalf("%d schema_version rows for %d versions (%v): a migration applied twice", n, distinct, err)
	}
	if _, err := s.Pool().Exec(ctx, `INSERT INTO ledger_schema_version VALUES (9999, 'future', now())`); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(ctx, dsn, &postgres.Options{Schema: schema})
	if err == nil || !strings.Contains(err.Error(), "newer than this program") {
		t.Fatalf("Open of a newer schema: %v", err)
	}
}

// TestDedup_Window: claims expire after the window and can be re-claimed;
// Prune forgets expired claims.
func TestDedup_Window(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	s := openFresh(t, &postgres.Options{DedupWindow: time.Minute, Now: clock})
	ctx := context.Background()
	if _, dup, err := s.Claim(ctx, "batch", "acme", "k", "id-1"); err != nil || dup {
		t.Fatalf("first claim: %v %v", dup, err)
	}
	now.Add(int64(59 * time.Second))
	if existing, dup, err := s.Claim(ctx, "batch", "acme", "k", "id-2"); err != nil || !dup || existing != "id-1" {
		t.Fatalf("claim inside the window: %q %v %v", existing, dup, err)
	}
	now.Add(int64(2 * time.Second))
	if _, dup, err := s.Claim(ctx, "batch", "acme", "k", "id-3"); err != nil || dup {
		t.Fatalf("claim after the window: dup=%v %v", dup, err)
	}
	if existing, dup, err := s.Claim(ctx, "batch", "acme", "k", "id-4"); err != nil || !dup || existing != "id-3" {
		t.Fatalf("claim after re-claim: %q %v %v", existing, dup, err)
	}
	now.Add(int64(2 * time.Minute))
	if _, err := s.Prune(ctx, clock()); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM ledger_dedup`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d dedup claims left after Prune (%v)", n, err)
	}
}

// TestConnectionsKilled: when the server drops the store's connections
// (a restart, a failover), calls fail with transient errors, never
// permanent ones, and the store recovers by itself.
func TestConnectionsKilled(t *testing.T) {
	t.Parallel()
	dsn, schema := freshSchema(t)
	ctx := context.Background()
	app := "ledgertest_" + schema
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, u.String(), &postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	task, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var killed int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatal("no connection of the store was found to terminate")
	}
	failures := 0
	for i := 0; i < 20; i++ {
		_, err := s.Get(ctx, task.ID)
		if err == nil {
			continue
		}
		failures++
		if !errors.Is(err, broker.ErrTransient) {
			t.Fatalf("Get after the server dropped the connection: %v, want transient", err)
		}
	}
	// Once the dead connections are gone, everything works.
	if _, err := s.Transition(ctx, ledger.TransitionRequest{ID: task.ID, To: ledger.Running, Reason: "start"}); err != nil {
		t.Fatalf("Transition after recovery: %v", err)
	}
	t.Logf("%d connection(s) terminated; %d read(s) failed transiently before recovery", killed, failures)
}
