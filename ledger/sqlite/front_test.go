package sqlite_test

import (
	"context"
	"testing"

	"github.com/switchyard-dev/switchyard/ledger/internal/front/fronttest"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
)

// TestStore_Front: the Store's methods are its front's, which validates
// every argument and the store's state before any SQL runs
// (fronttest.Cases, the same on the PostgreSQL store).
func TestStore_Front(t *testing.T) {
	fronttest.Run(t, "sqlite", func(t *testing.T, stub *fronttest.Stub) fronttest.Store {
		s, err := sqlite.Open(context.Background(), sqlite.Memory, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sqlite.SetBackend(s, stub)
		return s
	})
}
