package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

// Benchmark settings shared by both sides.
const (
	benchMsgs  = 20000
	benchBody  = 1024
	benchBatch = 100
)

// BenchmarkEndToEnd compares Switchyard on JetStream (through broker.Broker)
// with a raw nats.go jetstream Fetch loop on the same kind of stream and
// consumer (work queue, file storage, durable pull, explicit ack, AckWait
// 30 s, MaxAckPending unlimited), with the same batch sizes (publish 100 async,
// fetch up to 100) and 1 KiB messages, in one process and one run. Each
// side publishes benchMsgs messages while one consumer receives and acks
// them; msgs/s is benchMsgs over the time from the first publish to the
// last ack. The sides alternate benchRounds times and the medians are
// reported. Run it once:
//
//	go test ./adapters/nats/ -run '^$' -bench BenchmarkEndToEnd -benchtime 1x -count 1
func BenchmarkEndToEnd(b *testing.B) {
	ep := sharedEndpoint(b)
	var raw, sy []float64
	for i := 0; i < b.N; i++ {
		// Alternate the two sides, benchRounds times each, and compare
		// medians: the machine is shared, and a single pair of runs mostly
		// measures the neighbours.
		for r := 0; r < benchRounds; r++ {
			raw = append(raw, benchRaw(b, ep))
			sy = append(sy, benchSwitchyard(b, ep))
		}
	}
	mr, ms := median(raw), median(sy)
	b.Logf("raw msgs/s: %.0f; switchyard msgs/s: %.0f", raw, sy)
	b.ReportMetric(mr, "raw_msgs/s")
	b.ReportMetric(ms, "switchyard_msgs/s")
	b.ReportMetric(ms/mr, "ratio")
	b.ReportMetric(0, "ns/op")
}

// benchRounds is how many times each side runs in one benchmark run.
const benchRounds = 5

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func benchSwitchyard(b *testing.B, ep string) float64 {
	br := openBroker(b, testURL(b, ep, ""), nil)
	ctx := context.Background()
	// Create the consumer before timing, as a running worker would have it.
	if _, err := br.Receive(ctx, broker.ReceiveRequest{Lane: "bench", Max: 1}); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, benchBody)
	var received atomic.Int64
	start := time.Now()
	pubErr := make(chan error, 1)
	go func() {
		for sent := 0; sent < benchMsgs; sent += benchBatch {
			msgs := make([]*broker.Message, benchBatch)
			for i := range msgs {
				msgs[i] = &broker.Message{Lane: "bench", Kind: "bench.noop", Body: body}
			}
			rs, err := br.Publish(ctx, msgs...)
			if err == nil {
				for _, r := range rs {
					if r.Err != nil {
						err = r.Err
						break
					}
				}
			}
			if err != nil {
				pubErr <- err
				return
			}
		}
		pubErr <- nil
	}()
	for received.Load() < benchMsgs {
		ds, err := br.Receive(ctx, broker.ReceiveRequest{Lane: "bench", Max: benchBatch, Wait: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		if len(ds) == 0 {
			b.Fatalf("stalled after %d messages", received.Load())
		}
		if err := br.Ack(ctx, ds...); err != nil {
			b.Fatal(err)
		}
		received.Add(int64(len(ds)))
	}
	el := time.Since(start)
	if err := <-pubErr; err != nil {
		b.Fatal(err)
	}
	return float64(benchMsgs) / el.Seconds()
}

func benchRaw(b *testing.B, ep string) float64 {
	ns := testNamespace(b)
	nc, err := natsgo.Connect(ep)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4*DefaultMaxBatch))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	name := "RAW_" + ns
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"raw." + ns + ".>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: DefaultDedupWindow})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(context.Background(), name) }()
	subj := "raw." + ns + ".bench"
	c, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "bench", FilterSubject: subj, AckPolicy: jetstream.AckExplicitPolicy, AckWait: DefaultAckWait, MaxDeliver: DefaultMaxDeliver, MaxAckPending: DefaultMaxAckPending})
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, benchBody)
	start := time.Now()
	pubErr := make(chan error, 1)
	go func() {
		for sent := 0; sent < benchMsgs; sent += benchBatch {
			futs := make([]jetstream.PubAckFuture, 0, benchBatch)
			for i := 0; i < benchBatch; i++ {
				f, err := js.PublishMsgAsync(&natsgo.Msg{Subject: subj, Data: body})
				if err != nil {
					pubErr <- err
					return
				}
				futs = append(futs, f)
			}
			for _, f := range futs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					pubErr <- err
					return
				}
			}
		}
		pubErr <- nil
	}()
	received := 0
	for received < benchMsgs {
		// The same pull pattern as the driver: take what is ready, else wait
		// for one and top up.
		got := rawFetch(b, c, benchBatch, 0)
		if got == 0 {
			if got = rawFetch(b, c, 1, 5*time.Second); got == 0 {
				b.Fatalf("raw loop stalled after %d messages", received)
			}
		}
		received += got
	}
	el := time.Since(start)
	if err := <-pubErr; err != nil {
		b.Fatal(err)
	}
	return float64(benchMsgs) / el.Seconds()
}

func rawFetch(b *testing.B, c jetstream.Consumer, n int, wait time.Duration) int {
	var (
		batch jetstream.MessageBatch
		err   error
	)
	if wait == 0 {
		batch, err = c.FetchNoWait(n)
	} else {
		batch, err = c.Fetch(n, jetstream.FetchMaxWait(wait))
	}
	if err != nil {
		b.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
		got++
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, natsgo.ErrTimeout) {
		b.Fatal(fmt.Errorf("fetch: %w", err))
	}
	return got
}
