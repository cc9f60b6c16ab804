package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/switchyard-dev/switchyard/ledger/ledgertest"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
)

// BenchmarkStream measures a streamed chunk's cost (Emit's ledger write;
// see ledgertest.BenchmarkStream) in a temp file on disk:
//
//	go test ./ledger/sqlite/ -run '^$' -bench Stream -benchtime 3000x
//
// streams1 is one handler emitting; streams16 is sixteen at once (their
// writes share commits through the store's writer); batch20 appends 20
// chunks per write, as a switchyard.StreamWriter flush does.
func BenchmarkStream(b *testing.B) {
	for _, c := range []struct {
		name    string
		sync    string
		streams int
		batch   int
	}{
		{"full/streams1", "full", 1, 1},
		{"full/streams16", "full", 16, 1},
		{"full/streams1/batch20", "full", 1, 20},
		{"full/streams16/batch20", "full", 16, 20},
		{"normal/streams1", "normal", 1, 1},
		{"normal/streams16", "normal", 16, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "ledger.db"), &sqlite.Options{Synchronous: c.sync})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ledgertest.BenchmarkStream(b, s, c.streams, c.batch, true)
		})
	}
}
