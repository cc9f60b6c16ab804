package sqlite

import "github.com/switchyard-dev/switchyard/ledger/internal/front"

// SetDirectWriters switches s to the plain write pattern (each write its
// own transaction on the caller's goroutine) over n writer connections,
// for the benchmark that compares it with the writer goroutine's group
// commit. Call it before any concurrent use.
func SetDirectWriters(s *Store, n int) {
	s.direct = true
	s.w.SetMaxOpenConns(n)
	s.w.SetMaxIdleConns(n)
}

// GroupStats returns how many write transactions ran and how many writes
// they carried.
func GroupStats(s *Store) (txns, writes int64) { return s.txns.Load(), s.writes.Load() }

// SetBackend makes b the backend of s's front, in place of its SQL (see
// fronttest). Call it before any use.
func SetBackend(s *Store, b front.Backend) {
	front.Init(&s.ledgerFront, "sqlite", b, &s.closed, s.opts.Now)
}
