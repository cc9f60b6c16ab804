package asynq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
)

func init() {
	broker.Register("redis", open)
	broker.Register("rediss", open)
}

func open(ctx context.Context, u *url.URL) (broker.Driver, error) {
	return Open(ctx, u)
}

// Driver is the broker.Driver for Redis, in asynq's data layout. Open it
// through broker.Open with a redis:// or rediss:// URL, or with Open.
type Driver struct {
	cfg    *Config
	rdb    *redis.Client
	notify *notifier
	log    *slog.Logger

	queuesKnown sync.Map // queue name -> struct{}: SADD asynq:queues done
	closed      atomic.Bool
	done        chan struct{}
	closeOnce   sync.Once
}

var (
	_ broker.Driver   = (*Driver)(nil)
	_ broker.Releaser = (*Driver)(nil)
)

// Open connects to the Redis the URL names and checks it answers (PING,
// which also checks the credentials).
func Open(ctx context.Context, u *url.URL) (*Driver, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg)
}

// OpenConfig is Open with a Config built by hand; zero fields get their
// defaults (as documented on Config), and cfg itself is not modified.
func OpenConfig(ctx context.Context, cfg *Config) (*Driver, error) {
	if cfg == nil {
		return nil, broker.Invalidf("asynq adapter: nil config")
	}
	cfg = cfg.withDefaults()
	opt := &redis.Options{
		Addr:                  cfg.Addr,
		Username:              cfg.Username,
		Password:              cfg.Password,
		DB:                    cfg.DB,
		TLSConfig:             cfg.TLS,
		DialTimeout:           cfg.DialTimeout,
		ReadTimeout:           cfg.ReadTimeout,
		WriteTimeout:          cfg.WriteTimeout,
		PoolSize:              cfg.PoolSize,
		PoolTimeout:           cfg.ReadTimeout,
		ContextTimeoutEnabled: true,
		// The driver never retries (policy lives above it); a retried
		// script could also run twice.
		MaxRetries:      -1,
		DisableIdentity: true,
		Protocol:        2,
	}
	c := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout+cfg.ReadTimeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("asynq adapter: redis at %s: %w", cfg.Addr, classify("open", err, false))
	}
	d := &Driver{cfg: cfg, rdb: c, log: slog.Default().With("broker", "asynq", "addr", cfg.Addr), done: make(chan struct{})}
	d.notify = newNotifier(c)
	return d, nil
}

// Config returns the driver's configuration (do not modify it).
func (d *Driver) Config() *Config { return d.cfg }

// QueueName returns the asynq queue that carries lane.
func (d *Driver) QueueName(lane string) string { return QueueName(d.cfg.Namespace, lane) }

// Capabilities reports what Redis in asynq's layout does natively.
func (d *Driver) Capabilities() broker.Capabilities {
	return broker.Capabilities{
		MaxDelay:          0, // the scheduled zset holds any horizon
		MaxLease:          0,
		LeaseExtension:    true,
		Dedup:             true,
		DedupWindow:       d.cfg.DedupWindow,
		Ordering:          true,
		DeadLetterReasons: true,
		MaxAttempts:       false, // Broker checks on receive; crashes count through retried
		MaxMessageSize:    d.cfg.MaxMessageSize,
		MaxBatch:          d.cfg.MaxBatch,
		OldestReadyAge:    true,
	}
}

func (d *Driver) check(op string) error {
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	return nil
}

// Stats reads the queue's depths from asynq's keys: Ready = pending plus
// due scheduled/retry tasks, InFlight = active, Delayed = scheduled plus
// retry not yet due, DeadLettered = archived.
func (d *Driver) Stats(ctx context.Context, lane string) (broker.Stats, error) {
	if err := d.check("stats"); err != nil {
		return broker.Stats{}, err
	}
	k := d.keys(lane)
	now := time.Now()
	out, err := statsScript.Run(ctx, d.rdb, []string{k.pending, k.active, k.scheduled, k.retry, k.archived}, k.task, score(now)).Slice()
	if err != nil {
		return broker.Stats{}, classify("stats", err, false)
	}
	if len(out) != 5 {
		return broker.Stats{}, broker.Errorf("stats", broker.Permanent, "stats script returned %d values", len(out))
	}
	s := broker.Stats{Lane: lane}
	s.Ready, _ = out[0].(int64)
	s.InFlight, _ = out[1].(int64)
	s.Delayed, _ = out[2].(int64)
	s.DeadLettered, _ = out[3].(int64)
	if str, ok := out[4].(string); ok {
		if ns, err := strconv.ParseInt(str, 10, 64); err == nil && ns > 0 && s.Ready > 0 {
			if age := now.Sub(time.Unix(0, ns)); age > 0 {
				s.OldestReady = age
			}
		}
	}
	return s, nil
}

// Close stops waiting receives and closes the connections. Leases held are
// not released: those tasks come back after their leases, with a higher
// attempt. It is safe to call twice.
func (d *Driver) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		close(d.done)
		d.notify.close()
		err = d.rdb.Close()
		if errors.Is(err, redis.ErrClosed) {
			err = nil
		}
	})
	return err
}
