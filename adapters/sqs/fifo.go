package sqs

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// handle is the driver's part of a delivery.
type handle struct {
	queue   string // URL of the queue the message was received from
	receipt string
	lane    string
	dead    bool   // received from the dead-letter queue
	sqsID   string // SQS MessageId
	raw     string // the body as received, for undecodable dead letters
	group   string // FIFO live deliveries: the MessageGroupId it is gated on
	settled atomic.Bool
	fate    atomic.Int32 // an Outcome: what the driver last did with the message
}

func handleOf(op string, d *broker.Delivery) (*handle, error) {
	if d == nil {
		return nil, broker.Invalidf("%s: nil delivery", op)
	}
	h, ok := d.Handle.(*handle)
	if !ok || h == nil {
		return nil, broker.Invalidf("%s: delivery %s was not received by an sqs driver", op, d.ID)
	}
	return h, nil
}

// groupTracker keeps FIFO ordering exclusive per consumer. SQS never
// returns a group's messages while one of them is in flight, but one
// receive may return several messages of the same group at once. The
// driver hands out only the first and holds the others back, leased,
// until the first is acked or dead-lettered; a nack (or a lost lease)
// releases them to SQS at once, so the group's order is kept either way.
//
// SQS is the source of truth: when a receive returns a message of a group,
// nothing else of that group is in flight any more, so whatever the
// tracker remembered about the group is stale and is replaced.
type groupTracker struct {
	mu sync.Mutex
	m  map[groupKey]*groupState
}

type groupKey struct{ queue, group string }

type groupState struct {
	active  *handle // the delivery handed out, nil when none
	pending []*broker.Delivery
}

func newGroupTracker() *groupTracker { return &groupTracker{m: map[groupKey]*groupState{}} }

// admit records a delivery received from SQS. fresh says it is the first
// of its group in this receive response. True means hand it out now,
// false means it was held back behind an earlier one of the response.
func (g *groupTracker) admit(h *handle, d *broker.Delivery, fresh bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := groupKey{h.queue, h.group}
	s := g.m[k]
	if fresh || s == nil {
		g.m[k] = &groupState{active: h}
		return true
	}
	s.pending = append(s.pending, d)
	return false
}

// ready pops up to max held-back deliveries of queue whose group is free
// again and marks them handed out.
func (g *groupTracker) ready(queue string, max int) []*broker.Delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*broker.Delivery
	for k, s := range g.m {
		if len(out) >= max {
			break
		}
		if k.queue != queue || s.active != nil || len(s.pending) == 0 {
			continue
		}
		d := s.pending[0]
		s.pending = s.pending[1:]
		s.active = d.Handle.(*handle)
		out = append(out, d)
	}
	return out
}

// done ends the handed-out delivery h. With release, the group's
// held-back deliveries are returned (to be made visible again) and
// forgotten; otherwise they wait for the next Receive.
func (g *groupTracker) done(h *handle, release bool) []*broker.Delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := groupKey{h.queue, h.group}
	s := g.m[k]
	if s == nil || s.active != h {
		return nil // stale: the group has moved on
	}
	s.active = nil
	var out []*broker.Delivery
	if release {
		out, s.pending = s.pending, nil
	}
	if len(s.pending) == 0 {
		delete(g.m, k)
	}
	return out
}

// held returns the deliveries held back behind h, to extend them with it.
func (g *groupTracker) held(h *handle) []*broker.Delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.m[groupKey{h.queue, h.group}]; s != nil && s.active == h {
		return append([]*broker.Delivery(nil), s.pending...)
	}
	return nil
}

// drop forgets a held-back delivery whose lease could not be kept.
func (g *groupTracker) drop(h *handle, d *broker.Delivery) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := groupKey{h.queue, h.group}
	s := g.m[k]
	if s == nil {
		return
	}
	for i, p := range s.pending {
		if p == d {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			break
		}
	}
	if s.active == nil && len(s.pending) == 0 {
		delete(g.m, k)
	}
}

// drain returns and forgets every held-back delivery (on Close).
func (g *groupTracker) drain() []*broker.Delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*broker.Delivery
	for _, s := range g.m {
		out = append(out, s.pending...)
	}
	g.m = map[groupKey]*groupState{}
	return out
}

// dedupCache remembers, per FIFO queue, the idempotency keys this process
// published within SQS's deduplication window, so that a duplicate publish
// reports Duplicate with the first message's ID. SQS itself drops the
// duplicate (across processes too); the cache only makes the result exact.
type dedupCache struct {
	window time.Duration
	mu     sync.Mutex
	m      map[[2]string]dedupEntry
	ops    int
}

type dedupEntry struct {
	id string
	at time.Time
}

func newDedupCache(window time.Duration) *dedupCache {
	return &dedupCache{window: window, m: map[[2]string]dedupEntry{}}
}

// claim records key → id unless key was claimed within the window; then it
// returns the first id and true.
func (c *dedupCache) claim(queue, key, id string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops++
	if c.ops%1024 == 0 {
		for k, e := range c.m {
			if now.Sub(e.at) > c.window {
				delete(c.m, k)
			}
		}
	}
	k := [2]string{queue, key}
	if e, ok := c.m[k]; ok && now.Sub(e.at) <= c.window && e.id != id {
		return e.id, true
	}
	c.m[k] = dedupEntry{id: id, at: now}
	return "", false
}

// release forgets a claim whose publish failed.
func (c *dedupCache) release(queue, key, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := [2]string{queue, key}
	if e, ok := c.m[k]; ok && e.id == id {
		delete(c.m, k)
	}
}
