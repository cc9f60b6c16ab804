package postgres_test

import (
	"testing"

	"github.com/switchyard-dev/switchyard/ledger/ledgertest"
)

// BenchmarkTask measures the ledger's cost per task on the test server
// (see ledgertest.BenchmarkTask), serially and with 8 goroutines per CPU:
//
//	go test ./ledger/postgres/ -run '^$' -bench . -benchtime 2000x
func BenchmarkTask(b *testing.B) {
	for _, c := range []struct {
		name string
		par  int
	}{{"serial", 0}, {"parallel8", 8}} {
		b.Run(c.name, func(b *testing.B) {
			s := openFresh(b, nil)
			ledgertest.BenchmarkTask(b, s, c.par)
		})
	}
}
