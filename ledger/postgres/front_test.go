package postgres_test

import (
	"context"
	"testing"

	"github.com/switchyard-dev/switchyard/ledger/internal/front/fronttest"
	"github.com/switchyard-dev/switchyard/ledger/postgres"
)

// TestStore_Front: the Store's methods are its front's, which validates
// every argument and the store's state before any SQL runs
// (fronttest.Cases, the same on the SQLite store).
func TestStore_Front(t *testing.T) {
	dsn, schema := freshSchema(t)
	fronttest.Run(t, "postgres", func(t *testing.T, stub *fronttest.Stub) fronttest.Store {
		s, err := postgres.Open(context.Background(), dsn, &postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		postgres.SetBackend(s, stub)
		return s
	})
}
