package scheduler

import (
	"context"
	"path/filepath"
	"testing"

	_ "github.com/switchyard-dev/switchyard/adapters/embedded" // mem://
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
)

// OpenTestEnv opens what a test of this package (internal or external)
// runs a scheduler over: a SQLite ledger in t's temporary directory and an
// embedded broker in memory under namespace ns. Both close when t ends.
// (Internal tests cannot name ns with conformance.Namespace, which imports
// this package.)
func OpenTestEnv(t testing.TB, ns string) (*sqlite.Store, *broker.Broker) {
	t.Helper()
	ctx := context.Background()
	L, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	b, err := broker.Open(ctx, "mem://"+ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return L, b
}
