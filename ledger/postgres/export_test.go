package postgres

import "github.com/switchyard-dev/switchyard/ledger/internal/front"

// SetBackend makes b the backend of s's front, in place of its SQL (see
// fronttest). Call it before any use.
func SetBackend(s *Store, b front.Backend) {
	front.Init(&s.ledgerFront, "postgres", b, &s.closed, s.opts.Now)
}
