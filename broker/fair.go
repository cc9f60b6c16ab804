package broker

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Fairness within a lane (tenant fairness).
//
// A lane is one FIFO queue on every broker, so a tenant that enqueues
// 10,000 tasks ahead of another tenant's 100 would make the second wait for
// all of the first's. A fair lane (Options.Fair) is split into N physical
// shard queues: a message goes to the shard its tenant hashes to, and
// Receive takes from the non-empty shards in turn, splitting each batch
// evenly between them. A quiet tenant therefore waits behind at most its
// shard's share of the backlog, not behind the whole flood.
//
// Shard 0 is the lane's own queue; shard i > 0 is the lane named
// "<lane>:fair-<i>". Tenants that hash to the same shard share it (with N
// shards, two given tenants collide with probability 1/N: raise N for many
// heavy tenants). Messages without a tenant go to shard 0.
//
// Ordering keys and idempotency keys keep their guarantees per tenant: a
// tenant's messages always go to the same shard. Ordering between tasks of
// different tenants that share an ordering key is not kept in a fair lane.
// Changing N moves tenants between shards: raising it is safe (queued
// messages stay in shards that are still read), but lowering it strands the
// messages of the dropped shards until it is raised again, so drain a lane
// before lowering N. Either way a native deduplication window may miss a
// key published once before and once after the change (the ledger's
// idempotency check at Enqueue still holds).
//
// Idle fair lanes cost more broker calls: a receive that finds every shard
// empty polls them all, then long-polls one shard (rotating) for at most
// FairPoll before trying them all again, so a message can wait up to
// FairPoll longer in an idle fair lane than in a plain one.

// FairShardSep separates a fair lane's name from its shard number in the
// physical lane name ("batch:fair-3").
const FairShardSep = ":fair-"

// MaxFairShards is the largest number of shards a fair lane may have.
const MaxFairShards = 64

// DefaultFairShards is the number of shards of a lane named in a URL's fair
// parameter without a count.
const DefaultFairShards = 8

// fairLane is the receive state of one fair lane.
type fairLane struct {
	shards []string // physical lane names; shards[0] is the lane itself
	cursor atomic.Uint64
}

func newFairLanes(cfg map[string]int) (map[string]*fairLane, error) {
	if len(cfg) == 0 {
		return nil, nil
	}
	out := make(map[string]*fairLane, len(cfg))
	for lane, n := range cfg {
		if err := ValidateName("fair lane", lane); err != nil {
			return nil, err
		}
		if _, _, ok := SplitFairShard(lane); ok {
			return nil, Invalidf("fair lane %q is itself a shard name", lane)
		}
		if n < 1 || n > MaxFairShards {
			return nil, Invalidf("fair lane %q: %d shards; want 1 to %d", lane, n, MaxFairShards)
		}
		fl := &fairLane{shards: make([]string, n)}
		for i := range n {
			fl.shards[i] = FairShardName(lane, i)
			if err := ValidateName("fair lane shard", fl.shards[i]); err != nil {
				return nil, err
			}
		}
		out[lane] = fl
	}
	return out, nil
}

// FairShardName is the physical lane of shard i of lane.
func FairShardName(lane string, i int) string {
	if i == 0 {
		return lane
	}
	return lane + FairShardSep + strconv.Itoa(i)
}

// SplitFairShard splits a shard's physical lane name into its lane and
// shard number; ok is false for a name that is not a shard of a fair lane
// (shard 0, the lane itself, included).
func SplitFairShard(physical string) (lane string, shard int, ok bool) {
	i := strings.LastIndex(physical, FairShardSep)
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(physical[i+len(FairShardSep):])
	if err != nil || n <= 0 || n >= MaxFairShards || strconv.Itoa(n) != physical[i+len(FairShardSep):] {
		return "", 0, false
	}
	return physical[:i], n, true
}

// FairShard returns the shard of n that tenant's messages go to.
func FairShard(tenant string, n int) int {
	if tenant == "" || n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(tenant))
	return int(h.Sum32() % uint32(n))
}

// LaneOf returns the lane a physical lane name belongs to: the fair lane
// for a shard of a configured fair lane, else physical itself. Deliveries
// from Receive and Accept carry the logical lane already (the shard stays
// inside Broker, see Wire); LaneOf is for names met elsewhere, such as a
// queue named by an event source.
func (b *Broker) LaneOf(physical string) string {
	if b.fair == nil {
		return physical
	}
	if lane, _, ok := SplitFairShard(physical); ok {
		if _, fair := b.fair[lane]; fair {
			return lane
		}
	}
	return physical
}

// Fair reports the number of shards of lane (0 when it is not a fair lane).
func (b *Broker) Fair(lane string) int {
	if fl := b.fair[lane]; fl != nil {
		return len(fl.shards)
	}
	return 0
}

// fairPublishLane is the physical lane for m.
func (b *Broker) fairPublishLane(m *Message) string {
	fl := b.fair[m.Lane]
	if fl == nil {
		return m.Lane
	}
	return fl.shards[FairShard(m.Tenant, len(fl.shards))]
}

// receiveFair receives from the shards of a fair lane: each round asks
// every shard that may still hold messages for an equal part of what is
// left to take, starting from a rotating shard, until req.Max is reached or
// every shard ran dry; when all are empty it waits as described above.
func (b *Broker) receiveFair(ctx context.Context, fl *fairLane, req ReceiveRequest) ([]*Delivery, error) {
	n := len(fl.shards)
	deadline := time.Now().Add(req.Wait)
	poll := b.opts.FairPoll
	for {
		start := int(fl.cursor.Add(1) % uint64(n))
		active := make([]string, n)
		for i := range n {
			active[i] = fl.shards[(start+i)%n]
		}
		var out []*Delivery
		var firstErr error
		for len(active) > 0 && len(out) < req.Max {
			left := req.Max - len(out)
			per := (left + len(active) - 1) / len(active)
			var still []string
			for _, lane := range active {
				if len(out) >= req.Max {
					still = append(still, lane)
					continue
				}
				want := min(per, req.Max-len(out))
				r := req
				r.Lane, r.Max, r.Wait = lane, want, 0
				ds, err := b.receiveOne(ctx, r)
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				out = append(out, ds...)
				if len(ds) == want {
					still = append(still, lane) // may hold more
				}
			}
			active = still
		}
		if len(out) > 0 {
			return out, nil
		}
		if firstErr != nil {
			return nil, firstErr
		}
		wait := time.Until(deadline)
		if req.Wait <= 0 || wait <= 0 {
			return nil, nil
		}
		// Every shard is empty: long-poll one of them for a while, then
		// look at all of them again.
		r := req
		r.Lane, r.Wait = fl.shards[start], min(wait, poll)
		ds, err := b.receiveOne(ctx, r)
		if err != nil || len(ds) > 0 {
			return ds, err
		}
		if err := ctx.Err(); err != nil {
			return nil, nil
		}
	}
}

// statsFair sums a fair lane's shards.
func (b *Broker) statsFair(ctx context.Context, lane string, fl *fairLane) (Stats, error) {
	sum := Stats{Lane: lane}
	for _, s := range fl.shards {
		st, err := b.d.Stats(ctx, s)
		if err != nil {
			return Stats{}, Wrap("stats", Transient, err)
		}
		sum.Ready += st.Ready
		sum.InFlight += st.InFlight
		sum.Delayed += st.Delayed
		sum.DeadLettered += st.DeadLettered
		sum.OldestReady = max(sum.OldestReady, st.OldestReady)
	}
	return sum, nil
}

// foldFairLanes maps the shards of configured fair lanes to their lane.
func (b *Broker) foldFairLanes(lanes []string) []string {
	if b.fair == nil {
		return lanes
	}
	set := map[string]bool{}
	for _, l := range lanes {
		set[b.LaneOf(l)] = true
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// ParseFair parses the fair URL parameter: a comma-separated list of lanes,
// each optionally followed by ":<shards>" ("batch,bulk:16"). A lane without
// a count gets DefaultFairShards; a lane whose name ends in ":<digits>" must
// be given with its count.
func ParseFair(v string) (map[string]int, error) {
	out := map[string]int{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		// The count follows the last ":" (lane names may hold ":" too).
		lane, n := item, DefaultFairShards
		if i := strings.LastIndex(item, ":"); i > 0 {
			if c, err := strconv.Atoi(item[i+1:]); err == nil {
				lane, n = item[:i], c
			}
		}
		if _, dup := out[lane]; dup {
			return nil, Invalidf("fair parameter names lane %q twice", lane)
		}
		out[lane] = n
	}
	if len(out) == 0 {
		return nil, Invalidf("fair parameter is empty")
	}
	if _, err := newFairLanes(out); err != nil {
		return nil, fmt.Errorf("fair parameter: %w", err)
	}
	return out, nil
}
