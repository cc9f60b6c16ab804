package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger/ledgertest"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
)

// BenchmarkTask measures the ledger's cost per task in a temp file on
// disk (see ledgertest.BenchmarkTask):
//
//	go test ./ledger/sqlite/ -run '^$' -bench . -benchtime 2000x
//
// full/normal are the synchronous settings (full: every commit fsynced);
// serial runs one task at a time, parallel8 runs 8 goroutines per CPU.
// The direct1 and direct4 variants replace the store's writer goroutine
// (group commit over one connection) with the plain pattern, each write
// its own transaction on the caller's goroutine over one or four writer
// connections, for comparison.
func BenchmarkTask(b *testing.B) {
	for _, c := range []struct {
		name     string
		sync     string
		par      int
		direct   int
		inMemory bool
	}{
		{"full/serial", "full", 0, 0, false},
		{"full/serial/direct1", "full", 0, 1, false},
		{"full/parallel8", "full", 8, 0, false},
		{"full/parallel8/direct1", "full", 8, 1, false},
		{"full/parallel8/direct4", "full", 8, 4, false},
		{"normal/serial", "normal", 0, 0, false},
		{"normal/parallel8", "normal", 8, 0, false},
		{"memory/serial", "", 0, 0, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "ledger.db")
			if c.inMemory {
				path = sqlite.Memory
			}
			o := &sqlite.Options{Synchronous: c.sync}
			if c.direct > 0 {
				// Contending writers wait on the file lock; under load some
				// wait past the default 5s busy timeout.
				o.BusyTimeout = time.Minute
			}
			s, err := sqlite.Open(context.Background(), path, o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if c.direct > 0 {
				sqlite.SetDirectWriters(s, c.direct)
			}
			ledgertest.BenchmarkTask(b, s, c.par)
		})
	}
}
