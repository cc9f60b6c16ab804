package postgres_test

import (
	"testing"

	"github.com/switchyard-dev/switchyard/ledger/ledgertest"
)

// BenchmarkStream measures a streamed chunk's cost (Emit's ledger write;
// see ledgertest.BenchmarkStream) on the test server:
//
//	go test ./ledger/postgres/ -run '^$' -bench Stream -benchtime 3000x
func BenchmarkStream(b *testing.B) {
	for _, c := range []struct {
		name    string
		streams int
		batch   int
	}{{"streams1", 1, 1}, {"streams16", 16, 1}, {"streams1/batch20", 1, 20}, {"streams16/batch20", 16, 20}} {
		b.Run(c.name, func(b *testing.B) {
			s := openFresh(b, nil)
			ledgertest.BenchmarkStream(b, s, c.streams, c.batch, true)
		})
	}
}
