package embedded

import "github.com/switchyard-dev/switchyard/broker"

var (
	_ broker.PublishConcurrency = (*Driver)(nil)
	_ broker.LateGroupCommit    = (*Driver)(nil)
)

// MaxConcurrentPublishes implements broker.PublishConcurrency: the database
// has one connection, so concurrent publishes would only queue for it, each
// with its own transaction; Broker instead gathers them into one.
func (d *Driver) MaxConcurrentPublishes() int { return 1 }

// LateGroupCommit implements broker.LateGroupCommit: every publish is a
// commit on the one connection, so the callers just served are better in
// the next publish than in the one after it (with 8 publishers, ~7 tasks a
// commit instead of ~4).
func (d *Driver) LateGroupCommit() bool { return true }
