// Package sqliteopen holds what the embedded broker and the SQLite ledger
// share when they open a database file.
package sqliteopen

import (
	"context"
	"math/rand/v2"
	"strings"
	"time"
)

// RetryBusy runs setup (the switch to WAL and the schema) again while
// another process holds the file's lock: processes opening a new file at
// once race for it, and SQLite answers the switch to WAL with SQLITE_BUSY
// at once, without waiting out busy_timeout. It gives up after 15 seconds,
// or when ctx ends, returning setup's last error.
func RetryBusy(ctx context.Context, setup func() error) error {
	deadline := time.Now().Add(15 * time.Second)
	wait := 10 * time.Millisecond
	for {
		err := setup()
		if err == nil || !IsBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-time.After(wait + rand.N(wait)):
		case <-ctx.Done():
			return err
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// IsBusy reports whether err is SQLite's "another connection holds the
// lock" (SQLITE_BUSY or SQLITE_LOCKED).
func IsBusy(err error) bool {
	s := err.Error()
	return strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked") || strings.Contains(s, "SQLITE_LOCKED")
}
