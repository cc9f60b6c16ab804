package store

import "sync"

// claimsCap bounds Claims: past it, an arbitrary entry is forgotten (its
// Claim then asks the database, which gives the same answer).
const claimsCap = 4096

// Claims remembers the idempotency keys that this process's Create calls
// recorded on new tasks, so that the broker's dedup Claim of the same
// task (Client.Enqueue records the task, then publishes it with its key)
// is answered without a round trip: the task row already holds the key,
// and it is the only claim written. Safe for concurrent use; the zero
// value is ready.
type Claims struct {
	mu sync.Mutex
	m  map[string][2]string // task ID → tenant, key
}

// Add remembers that task id, just created, holds (tenant, key). A task
// without a key is not remembered.
func (c *Claims) Add(id, tenant, key string) {
	if key == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string][2]string)
	}
	if len(c.m) >= claimsCap {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[id] = [2]string{tenant, key}
}

// Take reports whether task id was remembered as holding (tenant, key),
// and forgets it: a second Claim of the same task (a retried publish)
// asks the database.
func (c *Claims) Take(id, tenant, key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.m[id]
	if !ok || k != [2]string{tenant, key} {
		return false
	}
	delete(c.m, id)
	return true
}
