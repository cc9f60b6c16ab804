package main

// The RabbitMQ peer benchmark: Switchyard and watermill-amqp, alternating
// in one process (docs/BENCHMARKS.md, "RabbitMQ"). It lives in this module
// so that watermill is no requirement of the library's.
//
//	cd bench/peers && SWITCHYARD_RABBITMQ_URL=amqp://guest:guest@127.0.0.1:5672/ \
//		go test -run '^$' -bench RabbitMQ -benchtime 3x

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	_ "github.com/switchyard-dev/switchyard/adapters/rabbitmq"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/benchkit"
	"github.com/switchyard-dev/switchyard/switchyardtest"
)

// The workload, as in adapters/rabbitmq's BenchmarkThroughput: benchN
// messages of 1 KiB, confirms with a window of 100, one consumer with
// prefetch 100 and manual acks, durable quorum queues, persistent messages.
const (
	benchBody     = 1024
	benchWindow   = 100
	benchBatch    = 100
	benchPubBatch = 1000
)

func benchN() int {
	if n, err := strconv.Atoi(os.Getenv("SWITCHYARD_BENCH_N")); err == nil && n > 0 {
		return n
	}
	return 20000
}

// BenchmarkRabbitMQ reports the median msgs/s of Switchyard and of
// watermill-amqp on the same workload, and Switchyard/watermill
// ("ratio_vs_watermill").
func BenchmarkRabbitMQ(b *testing.B) {
	ep := switchyardtest.RabbitMQ(b)
	n := benchN()
	var sy, wm []float64
	for i := 0; i < b.N; i++ {
		sy = append(sy, benchSwitchyard(b, ep, n))
		wm = append(wm, benchWatermill(b, ep, n))
	}
	s, w := medianOf(sy), medianOf(wm)
	b.ReportMetric(s, "switchyard_msgs/s")
	b.ReportMetric(w, "watermill_msgs/s")
	b.ReportMetric(s/w, "ratio_vs_watermill")
}

func medianOf(xs []float64) float64 {
	c := append([]float64(nil), xs...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c[len(c)/2]
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// rabbitURL is the rabbitmq:// URL of the AMQP endpoint ep with namespace ns.
func rabbitURL(b *testing.B, ep, ns string) string {
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		b.Fatalf("the RabbitMQ endpoint is not an amqp:// URL")
	}
	if u.Scheme == "amqp" {
		u.Scheme = "rabbitmq"
	}
	q := u.Query()
	q.Set("namespace", ns)
	u.RawQuery = q.Encode()
	return u.String()
}

// benchSwitchyard is the same workload through broker.Broker: Publish in
// batches of benchPubBatch (each streamed through the window of 100),
// Receive in batches of up to 100, Ack each batch.
func benchSwitchyard(b *testing.B, ep string, n int) float64 {
	u := rabbitURL(b, ep, "bench"+randHex(4))
	ctx := context.Background()
	br, err := broker.Open(ctx, u, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	r, err := benchkit.Stream(ctx, br, "bench", n, benchBody, benchPubBatch, benchBatch)
	if err != nil {
		b.Fatal(err)
	}
	return r.PerSecond()
}

// benchWatermillTimeout bounds one watermill pass so a stall fails the
// benchmark instead of hanging it.
const benchWatermillTimeout = 2 * time.Minute

// benchWatermill is the same workload through watermill-amqp v3, configured
// as close to the other sides as its Config allows: one shared connection,
// a durable queue declared with x-queue-type=quorum on the default
// exchange, persistent delivery (DefaultMarshaler), publisher confirms
// (Publish.ConfirmDelivery), prefetch 100 (Consume.Qos) and manual acks
// through msg.Ack().
//
// Differences it imposes: Publish waits for each message's confirm before
// publishing the next on that channel (a window of 1 per channel), so the
// window of 100 is reproduced with a pool of 100 confirm channels and 100
// publishing goroutines (at most 100 unconfirmed, as on the other sides,
// but spread over 100 channels instead of one); and its subscriber hands
// one message at a time to the handler and waits for its Ack before taking
// the next delivery (prefetch 100 still applies on the wire). Each
// message also carries watermill's UUID header.
func benchWatermill(b *testing.B, ep string, n int) float64 {
	logger := watermill.NopLogger{}
	q := "switchyard.bench-wm-" + randHex(4)
	cfg := wmamqp.NewDurableQueueConfig(ep)
	cfg.Queue.Arguments = amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	cfg.Publish.ConfirmDelivery = true
	cfg.Publish.ChannelPoolSize = benchWindow
	cfg.Consume.Qos.PrefetchCount = benchWindow
	conn, err := wmamqp.NewConnection(cfg.Connection, logger)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	defer func() {
		if ch, err := conn.Connection().Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	}()
	pub, err := wmamqp.NewPublisherWithConnection(cfg, logger, conn)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = pub.Close() }()
	sub, err := wmamqp.NewSubscriberWithConnection(cfg, logger, conn)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), benchWatermillTimeout)
	defer cancel()
	// Subscribe declares the queue and starts the consumer, outside the
	// measurement (as Consume is on the raw side).
	in, err := sub.Subscribe(ctx, q)
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, benchBody)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), body)
	}
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() {
		got := 0
		for got < n {
			select {
			case m, ok := <-in:
				if !ok {
					done <- errors.New("watermill: subscription closed early")
					return
				}
				m.Ack()
				got++
			case <-ctx.Done():
				done <- ctx.Err()
				return
			}
		}
		done <- nil
	}()
	var next atomic.Int64
	var pubErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for w := 0; w < benchWindow; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || pubErr.Load() != nil {
					return
				}
				if err := pub.Publish(q, msgs[i]); err != nil {
					pubErr.CompareAndSwap(nil, &err)
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := pubErr.Load(); p != nil {
		b.Fatal(*p)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	return float64(n) / el.Seconds()
}
