package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/limits"
)

// Options configure a Store. A nil *Options means defaults.
type Options struct {
	// Prefix is prepended to every key the store writes. Defaults to
	// "switchyard:limits:". In Redis Cluster, put a hash tag in it
	// ("{limits}:") so that the buckets one call takes sit in one slot.
	Prefix string
	// Now, when set, is the clock the bucket scripts use (tests). Defaults
	// to nil: the scripts read the Redis server's TIME, so every process
	// shares one clock whatever their own clocks say.
	Now func() time.Time
	// RunTTL is how long a task's running totals are kept after their last
	// change. Defaults to 7 days.
	RunTTL time.Duration
}

// Store is a limits.Store and limits.UsageStore in Redis, shared by every
// process that uses the same Redis and prefix.
type Store struct {
	c      redis.UniversalClient
	prefix string
	now    func() time.Time
	runTTL time.Duration
}

var (
	_ limits.Store      = (*Store)(nil)
	_ limits.UsageStore = (*Store)(nil)
)

// New returns a Store over c (which the caller keeps and closes).
func New(c redis.UniversalClient, opts *Options) (*Store, error) {
	if c == nil {
		return nil, broker.Invalidf("redisstore: nil client")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = "switchyard:limits:"
	}
	if o.RunTTL <= 0 {
		o.RunTTL = 7 * 24 * time.Hour
	}
	return &Store{c: c, prefix: o.Prefix, now: o.Now, runTTL: o.RunTTL}, nil
}

// nowArg is the clock argument of the scripts: "" means Redis TIME.
func (s *Store) nowArg() string {
	if s.now == nil {
		return ""
	}
	return strconv.FormatInt(s.now().UnixMicro(), 10)
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if broker.IsContext(err) {
		return err
	}
	return broker.Wrap("redisstore: "+op, broker.Transient, err)
}

func ff(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Take implements limits.Store.
func (s *Store) Take(ctx context.Context, takes []limits.Take) (time.Duration, error) {
	if len(takes) == 0 {
		return 0, nil
	}
	keys := make([]string, len(takes))
	args := make([]any, 0, 1+4*len(takes))
	args = append(args, s.nowArg())
	for i, t := range takes {
		if t.Bucket.Rate <= 0 || t.Bucket.Capacity <= 0 {
			return 0, broker.Invalidf("redisstore: bucket %q needs a positive rate and capacity", t.Bucket.Name)
		}
		keys[i] = s.prefix + "b|" + t.Bucket.Name
		args = append(args, ff(t.Bucket.Capacity), ff(t.Bucket.Rate), ff(t.N), ff(t.Floor))
	}
	v, err := takeScript.Run(ctx, s.c, keys, args...).Text()
	if err != nil {
		return 0, wrap("take", err)
	}
	us, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, wrap("take", fmt.Errorf("unexpected reply %q", v))
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Put implements limits.Store.
func (s *Store) Put(ctx context.Context, b limits.Bucket, delta float64) error {
	return wrap("put", bucketScript.Run(ctx, s.c, []string{s.prefix + "b|" + b.Name}, s.nowArg(), ff(b.Capacity), ff(b.Rate), "put", ff(delta)).Err())
}

// Block implements limits.Store.
func (s *Store) Block(ctx context.Context, b limits.Bucket, d time.Duration) error {
	return wrap("block", bucketScript.Run(ctx, s.c, []string{s.prefix + "b|" + b.Name}, s.nowArg(), ff(b.Capacity), ff(b.Rate), "block", strconv.FormatInt(d.Microseconds(), 10)).Err())
}

// Level implements limits.Store.
func (s *Store) Level(ctx context.Context, b limits.Bucket) (float64, error) {
	v, err := bucketScript.Run(ctx, s.c, []string{s.prefix + "b|" + b.Name}, s.nowArg(), ff(b.Capacity), ff(b.Rate), "level", "0").Text()
	if err != nil {
		return 0, wrap("level", err)
	}
	return strconv.ParseFloat(v, 64)
}

func (s *Store) runKey(id string) string   { return s.prefix + "run|" + id }
func (s *Store) startKey(id string) string { return s.prefix + "run|" + id + "|start" }
func (s *Store) aggSet() string            { return s.prefix + "aggkeys" }
func (s *Store) aggKey(enc string) string  { return s.prefix + "agg|" + enc }

// StartRun implements limits.UsageStore.
func (s *Store) StartRun(ctx context.Context, taskID string, now time.Time) (time.Time, error) {
	v, err := s.c.SetArgs(ctx, s.startKey(taskID), strconv.FormatInt(now.UnixMicro(), 10), redis.SetArgs{Mode: "NX", Get: true, TTL: s.runTTL}).Result()
	if errors.Is(err, redis.Nil) {
		return now, nil
	}
	if err != nil {
		return time.Time{}, wrap("start run", err)
	}
	us, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, wrap("start run", fmt.Errorf("unexpected value %q", v))
	}
	return time.UnixMicro(us), nil
}

func usageArgs(u limits.Usage) []any {
	return []any{u.ModelCalls, u.ToolCalls, u.Tokens, ff(u.Spend)}
}

func parseUsage(vals []any) (limits.Usage, error) {
	if len(vals) < 4 {
		return limits.Usage{}, fmt.Errorf("short reply")
	}
	str := func(i int) string { s, _ := vals[i].(string); return s }
	var u limits.Usage
	var err error
	if u.ModelCalls, err = strconv.ParseInt(str(0), 10, 64); err != nil {
		return u, err
	}
	if u.ToolCalls, err = strconv.ParseInt(str(1), 10, 64); err != nil {
		return u, err
	}
	if u.Tokens, err = strconv.ParseInt(str(2), 10, 64); err != nil {
		return u, err
	}
	u.Spend, err = strconv.ParseFloat(str(3), 64)
	return u, err
}

// Charge implements limits.UsageStore.
func (s *Store) Charge(ctx context.Context, taskID string, add, headroom, max limits.Usage) (limits.Usage, string, error) {
	args := append(append(append([]any{s.runTTL.Milliseconds()}, usageArgs(add)...), usageArgs(headroom)...), usageArgs(max)...)
	vals, err := chargeScript.Run(ctx, s.c, []string{s.runKey(taskID)}, args...).Slice()
	if err != nil {
		return limits.Usage{}, "", wrap("charge", err)
	}
	u, err := parseUsage(vals)
	if err != nil || len(vals) < 5 {
		return limits.Usage{}, "", wrap("charge", fmt.Errorf("unexpected reply %v", vals))
	}
	over, _ := vals[4].(string)
	return u, over, nil
}

// TaskUsage implements limits.UsageStore.
func (s *Store) TaskUsage(ctx context.Context, taskID string) (limits.Usage, error) {
	m, err := s.c.HGetAll(ctx, s.runKey(taskID)).Result()
	if err != nil {
		return limits.Usage{}, wrap("task usage", err)
	}
	return usageOf(m), nil
}

func usageOf(m map[string]string) limits.Usage {
	var u limits.Usage
	u.ModelCalls, _ = strconv.ParseInt(m["mc"], 10, 64)
	u.ToolCalls, _ = strconv.ParseInt(m["tc"], 10, 64)
	u.Tokens, _ = strconv.ParseInt(m["tok"], 10, 64)
	u.Spend, _ = strconv.ParseFloat(m["sp"], 64)
	return u
}

// Record implements limits.UsageStore.
func (s *Store) Record(ctx context.Context, r limits.Record) error {
	enc, err := json.Marshal(r.Key)
	if err != nil {
		return err
	}
	k := s.aggKey(string(enc))
	_, err = s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, s.aggSet(), string(enc))
		p.HIncrBy(ctx, k, "mc", r.Usage.ModelCalls)
		p.HIncrBy(ctx, k, "tc", r.Usage.ToolCalls)
		p.HIncrBy(ctx, k, "tok", r.Usage.Tokens)
		p.HIncrByFloat(ctx, k, "sp", r.Usage.Spend)
		return nil
	})
	return wrap("record", err)
}

// Sum implements limits.UsageStore.
func (s *Store) Sum(ctx context.Context, q limits.Query) ([]limits.Row, error) {
	encs, err := s.c.SMembers(ctx, s.aggSet()).Result()
	if err != nil {
		return nil, wrap("sum", err)
	}
	cmds := make([]*redis.MapStringStringCmd, len(encs))
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range encs {
			cmds[i] = p.HGetAll(ctx, s.aggKey(e))
		}
		return nil
	})
	if err != nil {
		return nil, wrap("sum", err)
	}
	aggs := map[limits.Key]limits.Usage{}
	for i, e := range encs {
		var k limits.Key
		if json.Unmarshal([]byte(e), &k) != nil {
			continue
		}
		aggs[k] = aggs[k].Add(usageOf(cmds[i].Val()))
	}
	return limits.GroupUsage(aggs, q), nil
}

// DeleteAll removes every key under the store's prefix (for tests and
// teardown; it scans, so keep it off hot paths).
func (s *Store) DeleteAll(ctx context.Context) error {
	iter := s.c.Scan(ctx, 0, s.prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return wrap("delete", err)
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := s.c.Del(ctx, keys[:n]...).Err(); err != nil {
			return wrap("delete", err)
		}
		keys = keys[n:]
	}
	return nil
}

// Prefix returns the store's key prefix.
func (s *Store) Prefix() string { return s.prefix }
