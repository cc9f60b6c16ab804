package sqlite

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
