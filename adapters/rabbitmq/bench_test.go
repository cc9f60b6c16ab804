package rabbitmq

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/internal/benchkit"
)

// The benchmark workload: benchN messages of 1 KiB, published with
// confirms (window 100) while one consumer (prefetch 100, manual ack)
// drains the queue; msgs/s is end to end, from the first publish to the
// last ack. Every side uses one connection, a durable quorum queue and
// persistent messages.
const (
	benchBody     = 1024
	benchWindow   = 100
	benchBatch    = 100  // Receive's Max
	benchPubBatch = 1000 // messages per Publish call: the driver streams them through the confirm window
)

func benchN() int {
	if n, err := strconv.Atoi(os.Getenv("SWITCHYARD_BENCH_N")); err == nil && n > 0 {
		return n
	}
	return 20000
}

// BenchmarkThroughput runs, in one process and one run, Switchyard on
// RabbitMQ (through broker.Broker) and a raw amqp091-go loop, alternating,
// and reports the median msgs/s of each and Switchyard/raw ("ratio"). The
// same workload through watermill-amqp, the peer, is in the bench/peers
// module (BenchmarkRabbitMQ), so that watermill stays out of the library's
// dependencies.
//
//	go test ./adapters/rabbitmq/ -run '^$' -bench Throughput -benchtime 3x
func BenchmarkThroughput(b *testing.B) {
	ep := testenv.RabbitMQ.Endpoint(b)
	n := benchN()
	var raw, sy []float64
	for i := 0; i < b.N; i++ {
		raw = append(raw, benchRaw(b, ep, n))
		sy = append(sy, benchSwitchyard(b, n))
	}
	r, s := median(raw), median(sy)
	b.ReportMetric(r, "raw_msgs/s")
	b.ReportMetric(s, "switchyard_msgs/s")
	b.ReportMetric(s/r, "ratio")
}

func median(xs []float64) float64 {
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

// benchRaw is the raw amqp091-go loop.
func benchRaw(b *testing.B, ep string, n int) float64 {
	conn, err := amqp.Dial(ep)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	pub, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		b.Fatal(err)
	}
	q := "switchyard.bench-raw-" + randHex(4)
	if _, err := pub.QueueDeclare(q, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
	}()
	con, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := con.Qos(benchWindow, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := con.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, benchBody)
	done := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	go func() {
		defer close(done)
		got := 0
		for d := range deliveries {
			if err := d.Ack(false); err != nil {
				b.Error(err)
				return
			}
			if got++; got == n {
				return
			}
		}
	}()
	ctx := context.Background()
	window := make([]*amqp.DeferredConfirmation, 0, benchWindow)
	for i := 0; i < n; i++ {
		if len(window) == benchWindow {
			if !window[0].Wait() {
				b.Fatal("nacked")
			}
			window = window[1:]
		}
		dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body})
		if err != nil {
			b.Fatal(err)
		}
		window = append(window, dc)
	}
	for _, dc := range window {
		if !dc.Wait() {
			b.Fatal("nacked")
		}
	}
	<-done
	el := time.Since(start)
	b.StopTimer()
	return float64(n) / el.Seconds()
}

// benchSwitchyard is the same workload through broker.Broker: Publish in
// batches of benchPubBatch (each streamed through the window of 100),
// Receive in batches of up to 100, Ack each batch.
func benchSwitchyard(b *testing.B, n int) float64 {
	ns := "bench" + randHex(4)
	u := testURL(b, ns, "", "", nil)
	ctx := context.Background()
	br, err := broker.Open(ctx, u, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		br.Close()
		cleanupNamespace(u, "bench")
	}()
	r, err := benchkit.Stream(ctx, br, "bench", n, benchBody, benchPubBatch, benchBatch)
	if err != nil {
		b.Fatal(err)
	}
	return r.PerSecond()
}
