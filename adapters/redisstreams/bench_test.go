package redisstreams

import (
	"context"
	"net/url"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	_ "github.com/switchyard-dev/switchyard/adapters/asynq" // redis://, the asynq adapter compared with
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
)

// Benchmark settings shared by every side.
const (
	benchBody  = 1024
	benchBatch = 100
)

// BenchmarkEndToEnd compares, in one process and one run on the same Redis:
//
//   - raw: a plain go-redis Streams loop — XADD pipelined 100 at a time by
//     one publisher, one consumer in a group reading XREADGROUP COUNT 100
//     BLOCK and acking each batch with one XACK;
//   - switchyard: this adapter through broker.Broker, the same shape
//     (publish batches of 100, Receive up to 100, Ack the batch);
//   - asynq: the asynq adapter (redis://) through broker.Broker, the same
//     loop.
//
// Each side moves BENCH_N (default 20,000) 1 KiB messages while the
// consumer runs; msgs/s is BENCH_N over the time from the first publish to
// the last ack. The sides alternate BENCH_ROUNDS (default 5) times and the
// medians are reported, with the ratios. Run it once:
//
//	go test ./adapters/redisstreams/ -run '^$' -bench BenchmarkEndToEnd -benchtime 1x -count 1
func BenchmarkEndToEnd(b *testing.B) {
	addr := sharedAddr(b)
	n := envInt("BENCH_N", 20000)
	rounds := envInt("BENCH_ROUNDS", 5)
	var raw, sy, aq []float64
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			if only := os.Getenv("BENCH_ONLY"); only == "switchyard" {
				// For profiling one side: -cpuprofile with BENCH_ONLY=switchyard.
				sy = append(sy, benchBroker(b, "redis-streams://"+addr+"/0?namespace="+conformance.Namespace(b), n))
				raw, aq = append(raw, 1), append(aq, 1)
				continue
			}
			raw = append(raw, benchRaw(b, addr, n))
			sy = append(sy, benchBroker(b, "redis-streams://"+addr+"/0?namespace="+conformance.Namespace(b), n))
			aq = append(aq, benchBroker(b, "redis://"+addr+"/0?namespace="+conformance.Namespace(b), n))
			b.Logf("round %d: raw %.0f, switchyard %.0f, asynq adapter %.0f msgs/s", r+1, raw[len(raw)-1], sy[len(sy)-1], aq[len(aq)-1])
		}
	}
	mr, ms, ma := median(raw), median(sy), median(aq)
	b.ReportMetric(mr, "raw_msgs/s")
	b.ReportMetric(ms, "switchyard_msgs/s")
	b.ReportMetric(ma, "asynq_adapter_msgs/s")
	b.ReportMetric(ms/mr, "ratio_raw")
	b.ReportMetric(ms/ma, "ratio_asynq")
	b.ReportMetric(0, "ns/op")
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// benchBroker runs the loop through broker.Broker on rawURL (a fresh
// namespace, removed afterwards).
func benchBroker(b *testing.B, rawURL string, n int) float64 {
	ctx := context.Background()
	br, err := broker.Open(ctx, rawURL, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	defer cleanupBench(rawURL)
	// Create the lane's queues before timing, as a running worker has them.
	if _, err := br.Receive(ctx, broker.ReceiveRequest{Lane: "bench", Max: 1}); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, benchBody)
	start := time.Now()
	pubErr := make(chan error, 1)
	go func() {
		for sent := 0; sent < n; sent += benchBatch {
			msgs := make([]*broker.Message, benchBatch)
			for i := range msgs {
				msgs[i] = &broker.Message{Lane: "bench", Kind: "bench.noop", Body: body}
			}
			rs, err := br.Publish(ctx, msgs...)
			for _, r := range rs {
				if err == nil {
					err = r.Err
				}
			}
			if err != nil {
				pubErr <- err
				return
			}
		}
		pubErr <- nil
	}()
	for got := 0; got < n; {
		ds, err := br.Receive(ctx, broker.ReceiveRequest{Lane: "bench", Max: benchBatch, Lease: time.Minute, Wait: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		if len(ds) == 0 {
			b.Fatalf("%s stalled after %d messages", broker.Redact(mustURL(rawURL)), got)
		}
		if err := br.Ack(ctx, ds...); err != nil {
			b.Fatal(err)
		}
		got += len(ds)
	}
	el := time.Since(start)
	if err := <-pubErr; err != nil {
		b.Fatal(err)
	}
	return float64(n) / el.Seconds()
}

// benchRaw is the plain go-redis Streams loop.
func benchRaw(b *testing.B, addr string, n int) float64 {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	stream := "sybenchraw:" + conformance.Namespace(b)
	defer c.Del(context.Background(), stream)
	if err := c.XGroupCreateMkStream(ctx, stream, "g", "0").Err(); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, benchBody)
	start := time.Now()
	pubErr := make(chan error, 1)
	go func() {
		for sent := 0; sent < n; sent += benchBatch {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := 0; i < benchBatch; i++ {
					p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"e", body}})
				}
				return nil
			})
			if err != nil {
				pubErr <- err
				return
			}
		}
		pubErr <- nil
	}()
	for got := 0; got < n; {
		xs, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{stream, ">"}, Count: benchBatch, Block: 5 * time.Second}).Result()
		if err != nil {
			b.Fatalf("raw loop after %d messages: %v", got, err)
		}
		ids := make([]string, 0, benchBatch)
		for _, x := range xs[0].Messages {
			ids = append(ids, x.ID)
		}
		if err := c.XAck(ctx, stream, "g", ids...).Err(); err != nil {
			b.Fatal(err)
		}
		got += len(ids)
	}
	el := time.Since(start)
	if err := <-pubErr; err != nil {
		b.Fatal(err)
	}
	return float64(n) / el.Seconds()
}

func mustURL(s string) *urlT {
	u, _ := parseURLString(s)
	return u
}

// cleanupBench removes a benchmark namespace of either adapter.
func cleanupBench(rawURL string) {
	u, err := parseURLString(rawURL)
	if err != nil {
		return
	}
	ns := u.Query().Get("namespace")
	c := redis.NewClient(&redis.Options{Addr: u.Host})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, pattern := range []string{"sy:{" + ns + "}:*", "asynq:{" + ns + ":*"} {
		var cursor uint64
		for i := 0; i < 10000; i++ {
			ks, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				break
			}
			if len(ks) > 0 {
				c.Unlink(ctx, ks...)
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	c.SRem(ctx, "asynq:queues", ns+":bench")
}

type urlT = url.URL

func parseURLString(s string) (*url.URL, error) { return url.Parse(s) }
