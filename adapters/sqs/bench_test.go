package sqs_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// Benchmark shape, the same for both sides.
const (
	benchPublishers = 4
	benchConsumers  = 4
	benchBatch      = 10 // SQS's batch limit for send, receive and delete
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
// over this driver) and with a raw aws-sdk-go-v2 loop, with the same batch
// sizes (10) and concurrency (4 publishers, 4 consumers), in one process
// and one run, in the order raw, Switchyard, Switchyard, raw, and reports
// msgs/s for each side over its two runs and their ratio. Against the emulator these are emulator
// figures: fauxqs itself is the bottleneck.
//
//	SWITCHYARD_SQS_ENDPOINT=http://127.0.0.1:9324 go test ./adapters/sqs/ -run '^$' -bench EndToEnd -benchtime 1x
func BenchmarkEndToEnd(b *testing.B) {
	ep := testenv.SQS.Endpoint(b)
	n := benchN()
	ns := namespace(b)
	d := openDriver(b, testURL(ep, ns+"raw", false, ""))
	for i := 0; i < b.N; i++ {
		// Warm the emulator and the connection pools on both paths.
		rawRun(b, d.Client(), ep, ns+"w", 500)
		syRun(b, testURL(ep, ns+"w", false, ""), 500)
		// A-B-B-A, so that neither side gains from running second.
		raw := rawRun(b, d.Client(), ep, ns+"r"+strconv.Itoa(i), n)
		sy := syRun(b, testURL(ep, ns+"s"+strconv.Itoa(i), false, ""), n)
		sy += syRun(b, testURL(ep, ns+"t"+strconv.Itoa(i), false, ""), n)
		raw += rawRun(b, d.Client(), ep, ns+"q"+strconv.Itoa(i), n)
		n2 := 2 * n
		b.ReportMetric(float64(n2)/raw.Seconds(), "raw_msgs/s")
		b.ReportMetric(float64(n2)/sy.Seconds(), "switchyard_msgs/s")
		b.ReportMetric(raw.Seconds()/sy.Seconds(), "ratio")
		b.Logf("emulator figures, %d x %d B, %d publishers, %d consumers, batch %d: raw %.0f msgs/s, switchyard %.0f msgs/s, ratio %.2f",
			n2, benchBodySize, benchPublishers, benchConsumers, benchBatch, float64(n2)/raw.Seconds(), float64(n2)/sy.Seconds(), raw.Seconds()/sy.Seconds())
	}
}

// rawRun is the baseline: SendMessageBatch, ReceiveMessage (10, long
// poll) and DeleteMessageBatch straight on the SDK.
func rawRun(b *testing.B, c *awssqs.Client, _ string, ns string, n int) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(ns + "_raw")})
	if err != nil {
		b.Fatal(err)
	}
	url := q.QueueUrl
	body := strings.Repeat("x", benchBodySize)
	var consumed atomic.Int64
	done := make(chan struct{})
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < benchConsumers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for consumed.Load() < int64(n) && ctx.Err() == nil {
				out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: benchBatch, WaitTimeSeconds: 1, VisibilityTimeout: 30})
				if err != nil || len(out.Messages) == 0 {
					continue
				}
				entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
				for j, m := range out.Messages {
					entries[j] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), ReceiptHandle: m.ReceiptHandle}
				}
				if _, err := c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: url, Entries: entries}); err != nil {
					b.Error(err)
					return
				}
				if consumed.Add(int64(len(out.Messages))) >= int64(n) {
					close(done)
				}
			}
		}()
	}
	var next atomic.Int64
	var pubWG sync.WaitGroup
	for p := 0; p < benchPublishers; p++ {
		wg.Add(1)
		pubWG.Add(1)
		go func() {
			defer wg.Done()
			defer pubWG.Done()
			for {
				hi := next.Add(benchBatch)
				lo := hi - benchBatch
				if lo >= int64(n) {
					return
				}
				hi = min(hi, int64(n))
				entries := make([]types.SendMessageBatchRequestEntry, 0, benchBatch)
				for j := lo; j < hi; j++ {
					entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.FormatInt(j, 10)), MessageBody: aws.String(body)})
				}
				if _, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: url, Entries: entries}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	var published atomic.Int64
	go func() { pubWG.Wait(); published.Store(int64(time.Since(start))) }()
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("raw run: %d of %d consumed", consumed.Load(), n)
	}
	el := time.Since(start)
	cancel()
	wg.Wait()
	pubWG.Wait()
	b.Logf("raw: %d published in %s, consumed in %s", n, time.Duration(published.Load()), el)
	return el
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
	// Resolve the lane's queues before the clock starts, as the raw run
	// creates its queue first.
	if _, err := br.Stats(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	body := []byte(strings.Repeat("x", benchBodySize))
	var consumed atomic.Int64
	done := make(chan struct{})
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < benchConsumers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for consumed.Load() < int64(n) && ctx.Err() == nil {
				ds, err := br.Receive(ctx, broker.ReceiveRequest{Lane: "bench", Max: benchBatch, Lease: 30 * time.Second, Wait: time.Second})
				if err != nil || len(ds) == 0 {
					continue
				}
				if err := br.Ack(ctx, ds...); err != nil {
					b.Error(err)
					return
				}
				if consumed.Add(int64(len(ds))) >= int64(n) {
					close(done)
				}
			}
		}()
	}
	var next atomic.Int64
	var pubWG sync.WaitGroup
	for p := 0; p < benchPublishers; p++ {
		wg.Add(1)
		pubWG.Add(1)
		go func() {
			defer wg.Done()
			defer pubWG.Done()
			for {
				hi := next.Add(benchBatch)
				lo := hi - benchBatch
				if lo >= int64(n) {
					return
				}
				hi = min(hi, int64(n))
				msgs := make([]*broker.Message, 0, benchBatch)
				for j := lo; j < hi; j++ {
					msgs = append(msgs, &broker.Message{Lane: "bench", Kind: "bench.msg", Body: body})
				}
				rs, err := br.Publish(ctx, msgs...)
				if err != nil {
					b.Error(err)
					return
				}
				for _, r := range rs {
					if r.Err != nil {
						b.Error(r.Err)
						return
					}
				}
			}
		}()
	}
	var published atomic.Int64
	go func() { pubWG.Wait(); published.Store(int64(time.Since(start))) }()
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("switchyard run: %d of %d consumed", consumed.Load(), n)
	}
	el := time.Since(start)
	cancel()
	wg.Wait()
	pubWG.Wait()
	b.Logf("switchyard: %d published in %s, consumed in %s", n, time.Duration(published.Load()), el)
	return el
}
