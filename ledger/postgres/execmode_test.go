package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/postgres"
)

// TestGroupCommit_ExecModes: with each of pgx's query exec modes in the
// DSN, writes that share groups (and so array statements) all succeed.
// With default_query_exec_mode=exec the array statements once failed
// with "cannot find encode plan" and every write of their group with it.
func TestGroupCommit_ExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dsn, schema := freshSchema(t)
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("default_query_exec_mode", mode)
			q.Set("schema", schema)
			u.RawQuery = q.Encode()
			l, err := ledger.Open(context.Background(), u.String())
			if err != nil {
				t.Fatal(err)
			}
			s := l.(*postgres.Store)
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const n = 200
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				errs []error
			)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					tk, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "interactive", IdempotencyKey: fmt.Sprintf("m-%d", i)})
					if err == nil {
						_, err = s.BeginRun(ctx, ledger.RunStart{ID: tk.ID, Attempt: 1, Lease: time.Minute})
					}
					if err == nil {
						_, err = s.PutStep(ctx, tk.ID, "s", []byte(`{"a":1}`))
					}
					if err == nil {
						_, err = s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: tk.ID, Number: 1, Outcome: "ok"},
							Transition: &ledger.TransitionRequest{ID: tk.ID, From: []ledger.State{ledger.Running}, To: ledger.Completed, Reason: "completed", IfAttemptBelow: 2}})
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}(i)
			}
			wg.Wait()
			for _, err := range errs[:min(len(errs), 3)] {
				t.Error(err)
			}
			if len(errs) > 0 {
				t.Fatalf("%d of %d tasks failed", len(errs), n)
			}
			stmts, writes := s.ArrayStats()
			t.Logf("%d array statements completed %d writes", stmts, writes)
		})
	}
}

// TestWriterPool_Sessions: in pgx's default exec mode (cache_statement)
// the groups with array statements run on the writers' own sessions, at
// most one per writer (pool_max_conns−1), opened with the planner
// settings as startup parameters, which the pool's connections do not
// get; in another mode (cache_describe) there are none and the groups
// run on the pool as before.
func TestWriterPool_Sessions(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cache_statement", "cache_describe"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dsn, schema := freshSchema(t)
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			app := "ledgertest_ws_" + schema
			q := u.Query()
			q.Set("default_query_exec_mode", mode)
			q.Set("schema", schema)
			q.Set("pool_max_conns", "4")
			q.Set("application_name", app)
			u.RawQuery = q.Encode()
			l, err := ledger.Open(context.Background(), u.String())
			if err != nil {
				t.Fatal(err)
			}
			s := l.(*postgres.Store)
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// Writes in waves until array statements have run (bounded).
			for wave := 0; wave < 20; wave++ {
				if n, _ := s.ArrayStats(); n >= 5 {
					break
				}
				var wg sync.WaitGroup
				for i := 0; i < 100; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						tk, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "interactive"})
						if err == nil {
							_, err = s.BeginRun(ctx, ledger.RunStart{ID: tk.ID, Attempt: 1, Lease: time.Minute})
						}
						if err != nil {
							t.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			arrays, _ := s.ArrayStats()
			opened, groups := postgres.WriterSessions(s)
			t.Logf("%d array statements; %d writer sessions opened, %d groups on them", arrays, opened, groups)
			if arrays == 0 {
				t.Fatal("no array statement ran")
			}
			var sessions int
			if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = $1 AND backend_type = 'client backend'`, app).Scan(&sessions); err != nil {
				t.Fatal(err)
			}
			var seqscan string
			if err := s.Pool().QueryRow(ctx, `SHOW enable_seqscan`).Scan(&seqscan); err != nil {
				t.Fatal(err)
			}
			if seqscan != "on" {
				t.Errorf("a pool connection has enable_seqscan=%s, want on (the writer sessions' settings leaked)", seqscan)
			}
			if mode != "cache_statement" {
				if opened != 0 || groups != 0 {
					t.Fatalf("%d writer sessions, %d groups on them in mode %s, want none", opened, groups, mode)
				}
				return
			}
			if opened < 1 || opened > 3 || groups == 0 {
				t.Fatalf("%d writer sessions opened (want 1–3, one per writer), %d groups on them (want some)", opened, groups)
			}
			if sessions > 4+3 {
				t.Fatalf("%d connections of the store, want at most pool_max_conns + 3 writer sessions", sessions)
			}
		})
	}
}
