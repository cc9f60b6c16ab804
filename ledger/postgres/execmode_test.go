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
