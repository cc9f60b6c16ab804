package postgres_test

import (
	"fmt"
	"testing"

	"github.com/switchyard-dev/switchyard/ledger/ledgertest"
)

// BenchmarkCreateMany compares recording tasks one Create at a time with
// CreateMany in batches:
//
//	go test ./ledger/postgres/ -run '^$' -bench CreateMany -benchtime 5000x
func BenchmarkCreateMany(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ledgertest.BenchmarkCreate(b, openFresh(b, nil), batch)
		})
	}
}
