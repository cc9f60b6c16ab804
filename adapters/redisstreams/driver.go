package redisstreams

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
)

func init() {
	broker.Register("redis-streams", func(ctx context.Context, u *url.URL) (broker.Driver, error) {
		return Open(ctx, u)
	})
}

// group is the consumer group of every stream the driver reads.
const group = "sy"

// Driver is a broker.Driver on Redis Streams. Open it through
// broker.Open("redis-streams://…") or with Open.
type Driver struct {
	cfg  *Config
	rdb  *redis.Client
	keys keys
	caps broker.Capabilities
	log  *slog.Logger

	mu      sync.Mutex
	queues  map[queueKey]*queue
	ensured map[queueKey]bool

	closed  atomic.Bool
	closing chan struct{}
}

type queueKey struct {
	lane string
	dead bool
}

var (
	_ broker.Driver     = (*Driver)(nil)
	_ broker.Releaser   = (*Driver)(nil)
	_ broker.Browser    = (*Driver)(nil)
	_ broker.LaneLister = (*Driver)(nil)
)

// Open connects to the server named by u and checks that it answers.
func Open(ctx context.Context, u *url.URL) (*Driver, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg)
}

// New opens a driver with a parsed configuration.
//
// Deprecated: Use OpenConfig, the constructor every adapter has.
func New(ctx context.Context, cfg *Config) (*Driver, error) { return OpenConfig(ctx, cfg) }

// OpenConfig opens a driver with a configuration (see Config for the
// defaults ParseURL fills in) and checks that the server answers.
func OpenConfig(ctx context.Context, cfg *Config) (*Driver, error) {
	if cfg == nil {
		return nil, broker.Invalidf("redisstreams: nil config")
	}
	opt := &redis.Options{
		Addr:         cfg.Addr,
		Username:     cfg.Username,
		Password:     cfg.Password,
		DB:           cfg.DB,
		TLSConfig:    cfg.TLS,
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout,
		PoolSize:     cfg.PoolSize,
		// The driver never retries on its own: a script that may have run
		// is reported as an unknown outcome instead of being run twice.
		MaxRetries: -1,
		// A pool that is exhausted fails fast instead of queueing callers.
		PoolTimeout: cfg.ReadTimeout,
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, classify("open: "+cfg.Addr, scrub(err, cfg), false)
	}
	d := &Driver{
		cfg:     cfg,
		rdb:     rdb,
		keys:    newKeys(cfg.Prefix, cfg.Namespace),
		log:     slog.Default().With("broker", "redis-streams", "server", cfg.Addr, "namespace", cfg.Namespace),
		queues:  map[queueKey]*queue{},
		ensured: map[queueKey]bool{},
		closing: make(chan struct{}),
	}
	d.caps = broker.Capabilities{
		MaxDelay:          0, // delays of any length: the delay set
		MaxLease:          0, // leases are sorted-set scores, extended by Extend
		LeaseExtension:    true,
		Dedup:             true,
		DedupWindow:       cfg.DedupWindow,
		Ordering:          false,
		DeadLetterReasons: true,
		MaxAttempts:       false,
		MaxMessageSize:    cfg.MaxMessageSize,
		MaxBatch:          cfg.MaxBatch,
		OldestReadyAge:    true,
	}
	return d, nil
}

// Capabilities reports what the driver does natively.
func (d *Driver) Capabilities() broker.Capabilities { return d.caps }

// Client returns the driver's Redis client, for tests and tools. Closing it
// breaks the driver.
func (d *Driver) Client() *redis.Client { return d.rdb }

// StreamKey returns the key of a lane's live stream (dead: its dead-letter
// stream). A foreign producer that XADDs there is read by the driver; an
// entry without a Switchyard envelope in field "e" is dead-lettered as
// undecodable.
func (d *Driver) StreamKey(lane string, dead bool) string { return d.keys.queue(lane, dead).stream }

// KeyPattern is the SCAN pattern of every key of the driver's namespace.
func (d *Driver) KeyPattern() string { return d.keys.pattern() }

// Close stops waiting receives and closes the connections. Unacked
// deliveries are redelivered after their leases. It is safe to call twice.
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	close(d.closing)
	return d.rdb.Close()
}

func (d *Driver) checkOpen(op string) error {
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	return nil
}

// queue returns the lane's live or dead-letter queue.
func (d *Driver) queue(lane string, dead bool) (*queue, error) {
	if err := broker.ValidateName("lane", lane); err != nil {
		return nil, err
	}
	k := queueKey{lane, dead}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queues[k]
	if q == nil {
		q = d.keys.queue(lane, dead)
		d.queues[k] = q
	}
	return q, nil
}

// ensure creates the queue's stream and consumer group (reading from the
// start, so nothing published before is missed) and records the lane,
// once per driver; force repeats it (after a NOGROUP reply).
func (d *Driver) ensure(ctx context.Context, q *queue, force bool) error {
	k := queueKey{q.lane, q.dead}
	d.mu.Lock()
	done := d.ensured[k]
	d.mu.Unlock()
	if done && !force {
		return nil
	}
	err := d.rdb.XGroupCreateMkStream(ctx, q.stream, group, "0").Err()
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		return classify("create stream "+q.lane, err, false)
	}
	if err := d.rdb.SAdd(ctx, d.keys.lanes(), q.lane).Err(); err != nil {
		return classify("create stream "+q.lane, err, false)
	}
	d.mu.Lock()
	d.ensured[k] = true
	d.mu.Unlock()
	return nil
}

// Lanes lists the lanes that were ever published to or received from in
// the namespace (broker.LaneLister).
func (d *Driver) Lanes(ctx context.Context) ([]string, error) {
	if err := d.checkOpen("lanes"); err != nil {
		return nil, err
	}
	ls, err := d.rdb.SMembers(ctx, d.keys.lanes()).Result()
	if err != nil {
		return nil, classify("lanes", err, false)
	}
	out := ls[:0]
	for _, l := range ls {
		if broker.ValidateName("lane", l) == nil {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out, nil
}

// dedupHash names the claim of (lane, tenant, key).
func dedupHash(lane, tenant, key string) string {
	h := sha256.New()
	for _, s := range []string{lane, tenant, key} {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil)[:20])
}

// Publish adds the batch with one script call: each message becomes a
// stream entry (or, with a future RunAt, a member of the lane's delay
// set), deduplicated by (lane, tenant, idempotency key) within
// dedup_window. A call whose reply is lost after it was sent fails with
// broker.ErrUnknownOutcome: publish again with the same idempotency key.
func (d *Driver) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	if err := d.checkOpen("publish"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, classify("publish", err, false)
	}
	res := make([]broker.PublishResult, len(msgs))
	ks := make([]string, 0, 4*len(msgs))
	args := make([]any, 0, 2+5*len(msgs))
	args = append(args, d.cfg.DedupWindow.Milliseconds(), d.cfg.MaxLen)
	idx := make([]int, 0, len(msgs))
	now := time.Now()
	var lastLane string
	var lastQ *queue
	plain := d.cfg.MaxLen == 0
	for i, m := range msgs {
		res[i].ID = m.ID
		if m.Size() > d.cfg.MaxMessageSize {
			res[i].Err = &broker.Error{Op: "publish", Class: broker.Permanent, Kind: broker.ErrTooLarge, Err: &broker.TooLargeError{Size: m.Size(), Max: d.cfg.MaxMessageSize}}
			continue
		}
		if m.Lane != lastLane || lastQ == nil {
			q, err := d.queue(m.Lane, false)
			if err != nil {
				res[i].Err = err
				continue
			}
			if err := d.ensure(ctx, q, false); err != nil {
				return nil, err
			}
			lastLane, lastQ = m.Lane, q
		}
		dk, hk := lastQ.stream, "0" // an unused key of the same slot
		if m.IdempotencyKey != "" {
			dk, hk = d.keys.dedup(dedupHash(m.Lane, m.Tenant, m.IdempotencyKey)), "1"
		}
		var due int64
		if m.RunAt.After(now) {
			due = ceilMS(m.RunAt)
		}
		plain = plain && hk == "0" && due == 0
		ks = append(ks, lastQ.stream, lastQ.delay, lastQ.held, dk)
		tok := ""
		if due > 0 {
			tok = m.ID + "/" + randHex()
		}
		args = append(args, m.ID, due, broker.EncodeEnvelope(m), hk, tok)
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return res, nil
	}
	if plain {
		// No idempotency key, no run-at ahead, no max_len: plain XADDs in
		// one pipeline, the same round trip and server work as a raw
		// producer.
		cmds, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := range idx {
				p.XAdd(ctx, &redis.XAddArgs{Stream: ks[4*j], Values: []any{fieldEnvelope, args[4+5*j]}})
			}
			return nil
		})
		if err != nil {
			failed := false
			for j, c := range cmds {
				if c.Err() != nil {
					res[idx[j]].Err = classify("publish", scrub(c.Err(), d.cfg), true)
					failed = true
				}
			}
			if !failed {
				return nil, classify("publish", scrub(err, d.cfg), true)
			}
		}
		return res, nil
	}
	out, err := publishScript.Run(ctx, d.rdb, ks, args...).Slice()
	if err != nil {
		return nil, classify("publish", scrub(err, d.cfg), true)
	}
	if len(out) != len(idx) {
		return nil, broker.Errorf("publish", broker.UnknownOutcome, "redis-streams: the publish script returned %d results for %d messages", len(out), len(idx))
	}
	for j, i := range idx {
		r, _ := out[j].(string)
		switch {
		case r == "" || r == "o":
		case r == "f":
			res[i].Err = broker.Errorf("publish", broker.Transient, "redis-streams: lane %s holds max_len=%d messages; nothing is dropped to make room, try again later", msgs[i].Lane, d.cfg.MaxLen)
		case strings.HasPrefix(r, "d:"):
			res[i].Duplicate = true
			res[i].ID = r[2:]
		default:
			res[i].Err = broker.Errorf("publish", broker.UnknownOutcome, "redis-streams: unexpected publish result %q", r)
		}
	}
	return res, nil
}

// ceilMS is t in Unix milliseconds, rounded up, so that "not before t"
// holds at millisecond resolution.
func ceilMS(t time.Time) int64 {
	n := broker.UnixNano(t)
	ms := n / 1e6
	if n%1e6 > 0 {
		ms++
	}
	return ms
}

// durMS is d in whole milliseconds, rounded up, between lo and maxLeaseMS.
func durMS(d time.Duration, lo int64) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return min(max(ms, lo), maxLeaseMS)
}

func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// scrub removes the password from an error's text, in case a library
// echoes it.
func scrub(err error, c *Config) error {
	if err == nil || len(c.Password) < 3 || !strings.Contains(err.Error(), c.Password) {
		return err
	}
	return &scrubbed{msg: strings.ReplaceAll(err.Error(), c.Password, "xxxxx"), err: err}
}

// scrubbed keeps the cause for errors.Is while showing redacted text.
type scrubbed struct {
	msg string
	err error
}

func (s *scrubbed) Error() string { return s.msg }
func (s *scrubbed) Unwrap() error { return s.err }
