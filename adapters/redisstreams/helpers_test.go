package redisstreams

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// sharedAddr is the machine's Redis (skips, or fails under
// SWITCHYARD_REQUIRE_BROKERS=1, when there is none).
func sharedAddr(t testing.TB) string {
	t.Helper()
	return testenv.Redis.Endpoint(t)
}

// testURL is a redis-streams:// URL on addr with a fresh namespace of the
// test's own (and extra parameters), whose keys are removed at the end.
func testURL(t testing.TB, addr, extra string) string {
	t.Helper()
	ns := conformance.Namespace(t)
	u := "redis-streams://" + addr + "/0?namespace=" + ns
	if extra != "" {
		u += "&" + extra
	}
	t.Cleanup(func() { cleanupURL(u) })
	return u
}

// cleanupURL deletes every key of the URL's namespace.
func cleanupURL(rawURL string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return
	}
	cfg, err := ParseURL(u)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: cfg.Addr, DB: cfg.DB, Username: cfg.Username, Password: cfg.Password})
	defer c.Close()
	pattern := newKeys(cfg.Prefix, cfg.Namespace).pattern()
	var cursor uint64
	for i := 0; i < 10000; i++ {
		ks, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return
		}
		if len(ks) > 0 {
			c.Unlink(ctx, ks...)
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// injectURL XADDs body as field "e" of a new entry of the lane's live
// stream, as a foreign producer would.
func injectURL(ctx context.Context, rawURL, lane string, body []byte) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	cfg, err := ParseURL(u)
	if err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: cfg.Addr, DB: cfg.DB, Username: cfg.Username, Password: cfg.Password})
	defer c.Close()
	return c.XAdd(ctx, &redis.XAddArgs{Stream: newKeys(cfg.Prefix, cfg.Namespace).queue(lane, false).stream, Values: []any{fieldEnvelope, body}}).Err()
}

// openBroker opens a Broker on rawURL and closes it at the end of the test.
func openBroker(t testing.TB, rawURL string, opts *broker.Options) *broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, rawURL, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func driverOf(b *broker.Broker) *Driver { return b.Driver().(*Driver) }

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// receiveN receives from lane until it has n deliveries or timeout passes.
func receiveN(t testing.TB, b *broker.Broker, req broker.ReceiveRequest, n int, timeout time.Duration) []*broker.Delivery {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out []*broker.Delivery
	for len(out) < n && time.Now().Before(deadline) {
		req.Max = n - len(out)
		req.Wait = min(time.Until(deadline), time.Second)
		ds, err := b.Receive(ctxFor(t, 30*time.Second), req)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		out = append(out, ds...)
	}
	return out
}
