// Package groupctx gives work done on behalf of several callers (a group
// commit) a context that lives while any of theirs does.
package groupctx

import (
	"context"
	"sync"
)

// Any returns a context carrying the values of ctxs[0] that is cancelled
// once every one of ctxs is done (or when release is called), so that one
// caller giving up does not cancel the work the others still wait for.
// release must be called when the work ends. ctxs must not be empty.
func Any(ctxs ...context.Context) (ctx context.Context, release func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctxs[0]))
	for _, c := range ctxs {
		if c.Done() == nil {
			// One caller's context never ends (context.Background, the
			// common case): neither does the group's, until release.
			return ctx, cancel
		}
	}
	var mu sync.Mutex
	live := len(ctxs)
	stops := make([]func() bool, 0, len(ctxs))
	for _, c := range ctxs {
		stops = append(stops, context.AfterFunc(c, func() {
			mu.Lock()
			live--
			if live == 0 {
				cancel()
			}
			mu.Unlock()
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
