// Package cacheroute keeps the model calls of one cache key on one target
// while it has capacity, so that a prompt prefix is read from the cache
// that already holds it.
//
// # What a target is
//
// A target is whatever holds a prompt cache of its own: a self-hosted
// inference replica (vLLM's and SGLang's prefix caches are per replica), a
// provider account or region, a worker with its own endpoint. A Router
// maps a cache key (switchyard.EnqueueOpts.CacheKey, which reaches the
// handler as job metadata scheduler.MetaCacheKey) to a target.
//
// # How a target is chosen
//
// Rendezvous (highest-random-weight) hashing orders the targets per key:
// the first is the key's home. Acquire takes the first target in that
// order with a free slot (Capacity calls in flight), so a key stays on its
// home while the home has capacity and spills to its next target, not to
// a random one, when it is full (bounded-load hashing). Keys spread evenly
// over the targets, and adding or removing one of N targets moves only
// about 1/N of the keys.
//
// # Across processes
//
// The order is a pure function of the key and the target names: every
// worker process with the same targets sends a key to the same home, with
// no coordination. The capacity bound is per process (each Router counts
// its own calls in flight): a fleet of P processes may put up to
// P×Capacity calls on one target. Routing tasks themselves to one worker
// process (per-key queues or lane shards) is not done: the broker hands a
// task to whichever worker asks first, and the affinity is at the target.
//
// # Measuring the effect
//
// Record adds a call's reported usage to its key's tally and Shares reports
// the cached-token share per key, so that the effect is measured, not
// assumed (docs/BENCHMARKS.md, "Cache-key routing").
package cacheroute

import (
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"

	"github.com/switchyard-dev/switchyard/spend"
)

// ErrFull is returned by Acquire when every target is at capacity.
var ErrFull = errors.New("cacheroute: every target is at capacity")

// Router routes cache keys to targets. It is safe for concurrent use.
type Router struct {
	targets  []string
	capacity int

	mu       sync.Mutex
	inflight []int
	spilled  int64
	homed    int64
	tally    map[string]*tally
}

type tally struct {
	calls int64
	usage spend.Usage
}

// New returns a Router over targets (unique, non-empty names) with
// capacity calls in flight per target (at least 1).
func New(targets []string, capacity int) (*Router, error) {
	if len(targets) == 0 {
		return nil, errors.New("cacheroute: no targets")
	}
	if capacity < 1 {
		return nil, fmt.Errorf("cacheroute: capacity %d, want at least 1", capacity)
	}
	seen := map[string]bool{}
	for _, t := range targets {
		if t == "" || seen[t] {
			return nil, fmt.Errorf("cacheroute: target names must be unique and non-empty, got %q", t)
		}
		seen[t] = true
	}
	return &Router{targets: append([]string(nil), targets...), capacity: capacity, inflight: make([]int, len(targets)), tally: map[string]*tally{}}, nil
}

// score is the rendezvous weight of key on target.
func score(key, target string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(target))
	h.Write([]byte{0})
	h.Write([]byte(key))
	// fnv's low bits mix poorly for similar inputs: finish with a
	// 64-bit mixer (splitmix64's).
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Order returns the targets' indexes in key's preference order: its home
// first.
func (r *Router) Order(key string) []int {
	idx := make([]int, len(r.targets))
	scores := make([]uint64, len(r.targets))
	for i, t := range r.targets {
		idx[i], scores[i] = i, score(key, t)
	}
	sort.Slice(idx, func(a, b int) bool {
		if scores[idx[a]] != scores[idx[b]] {
			return scores[idx[a]] > scores[idx[b]]
		}
		return idx[a] < idx[b]
	})
	return idx
}

// Home returns key's home target.
func (r *Router) Home(key string) string { return r.targets[r.Order(key)[0]] }

// Targets returns the target names, in the order given to New.
func (r *Router) Targets() []string { return append([]string(nil), r.targets...) }

// Acquire takes a slot on the first target in key's order that has one
// and returns the target's index and a release func (call it once, when
// the call is over; later calls do nothing). A key of "" has no affinity:
// it takes the least loaded target. ErrFull when every target is full.
func (r *Router) Acquire(key string) (int, func(), error) {
	var order []int
	if key != "" {
		order = r.Order(key)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pick := -1
	if key == "" {
		for i, n := range r.inflight {
			if n < r.capacity && (pick < 0 || n < r.inflight[pick]) {
				pick = i
			}
		}
	} else {
		for _, i := range order {
			if r.inflight[i] < r.capacity {
				pick = i
				break
			}
		}
		if pick >= 0 {
			if pick == order[0] {
				r.homed++
			} else {
				r.spilled++
			}
		}
	}
	if pick < 0 {
		return -1, func() {}, ErrFull
	}
	r.inflight[pick]++
	var once sync.Once
	return pick, func() {
		once.Do(func() {
			r.mu.Lock()
			r.inflight[pick]--
			r.mu.Unlock()
		})
	}, nil
}

// Placement counts the keyed calls Acquire placed on their home and those
// that spilled to another target because the home was full.
func (r *Router) Placement() (homed, spilled int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.homed, r.spilled
}

// MaxTallyKeys bounds the keys a Router tallies one by one, so that a
// long-running worker that sees ever new cache keys keeps a bounded map:
// once it holds this many, calls of keys it has not seen yet are tallied
// together under OtherKey. The spend report (the ledger's spend rows, by
// cache_key) has every key.
const MaxTallyKeys = 10000

// OtherKey is the tally of the calls of keys beyond MaxTallyKeys.
const OtherKey = "(other keys)"

// Record adds one call's reported usage to key's tally. Negative counts
// are refused.
func (r *Router) Record(key string, u spend.Usage) error {
	if err := u.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tally[key]
	if t == nil && len(r.tally) >= MaxTallyKeys {
		key = OtherKey
		t = r.tally[key]
	}
	if t == nil {
		t = &tally{}
		r.tally[key] = t
	}
	t.calls++
	t.usage = t.usage.Add(u)
	return nil
}

// Share is one key's calls and cached-token share.
type Share struct {
	Key   string
	Calls int64
	Usage spend.Usage
	// Cached is the share of input tokens read from the cache, 0..1.
	Cached float64
}

// Shares reports every recorded key's tally, sorted by key.
func (r *Router) Shares() []Share {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Share, 0, len(r.tally))
	for k, t := range r.tally {
		s := Share{Key: k, Calls: t.calls, Usage: t.usage}
		if in := t.usage.Input + t.usage.CachedInput; in > 0 {
			s.Cached = float64(t.usage.CachedInput) / float64(in)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
