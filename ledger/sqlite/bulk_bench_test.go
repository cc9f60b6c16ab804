package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/switchyard-dev/switchyard/ledger/ledgertest"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
)

// BenchmarkCreateMany compares recording tasks one Create at a time with
// CreateMany in batches:
//
//	go test ./ledger/sqlite/ -run '^$' -bench CreateMany -benchtime 5000x
func BenchmarkCreateMany(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "ledger.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ledgertest.BenchmarkCreate(b, s, batch)
		})
	}
}
