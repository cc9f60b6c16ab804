package gcppubsub_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/switchyard-dev/switchyard/adapters/gcppubsub"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
)

// Benchmark shape, the same for both sides.
const (
	benchPublishers = 4
	benchConsumers  = 4
	benchBatch      = 100
	benchBodySize   = 1024
)

func benchN() int {
	if n, err := strconv.Atoi(os.Getenv("SWITCHYARD_BENCH_N")); err == nil && n > 0 {
		return n
	}
	return 5000
}

// BenchmarkEndToEnd publishes and consumes n × 1 KiB messages end to end
// (n = SWITCHYARD_BENCH_N, default 5,000) through Switchyard (broker.Broker
// over this driver) and with a raw loop on the same v2 admin clients
// (Publish, Pull, Acknowledge), with the same batch size (100) and
// concurrency (4 publishers, 4 consumers), in one process and one run, in
// the order raw, Switchyard, Switchyard, raw, and reports msgs/s for each
// side over its two runs and their ratio. Against pstest these are fake
// figures: pstest, one mutex over everything, is the bottleneck.
//
//	go test ./adapters/gcppubsub/ -run '^$' -bench EndToEnd -benchtime 1x
func BenchmarkEndToEnd(b *testing.B) {
	addr := emulator(b)
	n := benchN()
	ns := conformance.Namespace(b)
	for i := 0; i < b.N; i++ {
		rawRun(b, addr, ns+"w", 500)
		syRun(b, testURL(addr, ns+"x", ""), 500)
		raw := rawRun(b, addr, ns+"r"+strconv.Itoa(i), n)
		sy := syRun(b, testURL(addr, ns+"s"+strconv.Itoa(i), ""), n)
		sy += syRun(b, testURL(addr, ns+"t"+strconv.Itoa(i), ""), n)
		raw += rawRun(b, addr, ns+"q"+strconv.Itoa(i), n)
		n2 := 2 * n
		b.ReportMetric(float64(n2)/raw.Seconds(), "raw_msgs/s")
		b.ReportMetric(float64(n2)/sy.Seconds(), "switchyard_msgs/s")
		b.ReportMetric(raw.Seconds()/sy.Seconds(), "ratio")
		b.Logf("pstest figures, %d x %d B, %d publishers, %d consumers, batch %d: raw %.0f msgs/s, switchyard %.0f msgs/s, ratio %.2f",
			n2, benchBodySize, benchPublishers, benchConsumers, benchBatch, float64(n2)/raw.Seconds(), float64(n2)/sy.Seconds(), raw.Seconds()/sy.Seconds())
	}
}

// rawRun is the baseline: Publish, Pull (100, held open) and Acknowledge
// straight on the library's admin clients, with the topic and
// subscription created first.
func rawRun(b *testing.B, addr, ns string, n int) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d, err := openDriver(ctx, testURL(addr, ns, ""))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	b.Cleanup(func() { deleteNamespace(addr, ns) })
	topics, subs := d.Clients()
	topic := "projects/" + "switchyard-test" + "/topics/" + ns + "+raw"
	sub := "projects/" + "switchyard-test" + "/subscriptions/" + ns + "+raw"
	if _, err := topics.CreateTopic(ctx, &pb.Topic{Name: topic}); err != nil {
		b.Fatal(err)
	}
	if _, err := subs.CreateSubscription(ctx, &pb.Subscription{Name: sub, Topic: topic, AckDeadlineSeconds: 30}); err != nil {
		b.Fatal(err)
	}
	return loop(b, ctx, n, func(ctx context.Context, count int) error {
		msgs := make([]*pb.PubsubMessage, count)
		body := []byte(strings.Repeat("x", benchBodySize))
		for j := range msgs {
			msgs[j] = &pb.PubsubMessage{Data: body}
		}
		_, err := topics.Publish(ctx, &pb.PublishRequest{Topic: topic, Messages: msgs})
		return err
	}, func(ctx context.Context) (int, error) {
		return rawConsume(ctx, subs, sub)
	})
}

func rawConsume(ctx context.Context, subs *vkit.SubscriptionAdminClient, sub string) (int, error) {
	// A deadline well past the server's hold (pstest answers an empty pull
	// after 500 ms), so that no pull is cut off after the server took
	// messages: those would sit out their ack deadline.
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := subs.Pull(pctx, &pb.PullRequest{Subscription: sub, MaxMessages: benchBatch})
	cancel()
	if err != nil || len(resp.GetReceivedMessages()) == 0 {
		return 0, nil
	}
	ids := make([]string, len(resp.GetReceivedMessages()))
	for j, rm := range resp.GetReceivedMessages() {
		ids[j] = rm.GetAckId()
	}
	return len(ids), subs.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: sub, AckIds: ids})
}

// syRun is the same workload through broker.Broker.
func syRun(b *testing.B, rawURL string, n int) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	br, err := broker.Open(ctx, rawURL, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	d := br.Driver().(*gcppubsub.Driver)
	b.Cleanup(func() { deleteNamespace(d.Config().Emulator, d.Config().Namespace) })
	// Resolve the lane before the clock starts, as the raw run creates
	// its topic first.
	if _, err := br.Stats(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	body := []byte(strings.Repeat("x", benchBodySize))
	return loop(b, ctx, n, func(ctx context.Context, count int) error {
		msgs := make([]*broker.Message, count)
		for j := range msgs {
			msgs[j] = &broker.Message{Lane: "bench", Kind: "bench.msg", Body: body}
		}
		rs, err := br.Publish(ctx, msgs...)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Err != nil {
				return r.Err
			}
		}
		return nil
	}, func(ctx context.Context) (int, error) {
		ds, err := br.Receive(ctx, broker.ReceiveRequest{Lane: "bench", Max: benchBatch, Lease: 30 * time.Second, Wait: time.Second})
		if err != nil || len(ds) == 0 {
			return 0, nil
		}
		return len(ds), br.Ack(ctx, ds...)
	})
}

// loop runs benchPublishers publishers of batches and benchConsumers
// consumers until n messages are consumed, and returns how long it took.
func loop(b *testing.B, ctx context.Context, n int, publish func(context.Context, int) error, consume func(context.Context) (int, error)) time.Duration {
	b.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var consumed atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < benchConsumers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for consumed.Load() < int64(n) && ctx.Err() == nil {
				got, err := consume(ctx)
				if err != nil && ctx.Err() == nil {
					b.Error(err)
					return
				}
				if consumed.Add(int64(got)) >= int64(n) {
					once.Do(func() { close(done) })
				}
			}
		}()
	}
	var next atomic.Int64
	for p := 0; p < benchPublishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				hi := next.Add(benchBatch)
				lo := hi - benchBatch
				if lo >= int64(n) {
					return
				}
				if err := publish(ctx, int(min(hi, int64(n))-lo)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("%d of %d consumed", consumed.Load(), n)
	}
	el := time.Since(start)
	cancel()
	wg.Wait()
	return el
}
