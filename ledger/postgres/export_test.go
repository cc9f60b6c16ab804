package postgres

import "github.com/switchyard-dev/switchyard/ledger/internal/front"

// SetBackend makes b the backend of s's front, in place of its SQL (see
// fronttest). Call it before any use.
func SetBackend(s *Store, b front.Backend) {
	front.Init(&s.ledgerFront, "postgres", b, &s.closed, s.opts.Now)
}

// WriterSessions reports how many writer sessions the group writer opened
// and how many groups ran on one (group.go).
func WriterSessions(s *Store) (opened, groups int64) {
	if s.g == nil {
		return 0, 0
	}
	return s.g.opened.Load(), s.g.onSession.Load()
}
