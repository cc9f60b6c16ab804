package integration_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/asynq"
	_ "github.com/switchyard-dev/switchyard/adapters/nats"
	_ "github.com/switchyard-dev/switchyard/adapters/rabbitmq"
	_ "github.com/switchyard-dev/switchyard/adapters/sqs"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/internal/benchkit"
	"github.com/switchyard-dev/switchyard/internal/runtimebench"
	"github.com/switchyard-dev/switchyard/internal/testclean"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// benchBrokers are the brokers BenchmarkRuntime_LedgerOff runs on; set
// SWITCHYARD_BENCH_BROKERS (comma-separated adapter names) to choose.
func benchBrokers() []string {
	if s := os.Getenv("SWITCHYARD_BENCH_BROKERS"); s != "" {
		return strings.Split(s, ",")
	}
	return []string{"embedded", "asynq", "nats"}
}

// BenchmarkRuntime_LedgerOff measures the runtime's own cost: b.N small
// tasks enqueued one per Client.Enqueue call from 8 goroutines while a
// Server (Slots 64, Prefetch 128) runs them with a no-op handler and acks
// them, ledger off; "bulk" enqueues them with EnqueueMany, 1,000 a call,
// from one goroutine. Beside them, "loop" is the adapter's own loop through
// broker.Broker (batched publish, then receive and ack with 8 consumers),
// the ceiling the runtime is compared with. "rawclient" and
// "rawclientbatch" are the broker's own Go client (one publish per call;
// 8 goroutines × chunks of 100, 10 on SQS) and "batched" is the runtime
// in the batched shape (8 goroutines × EnqueueMany chunks of 100, 10 on
// SQS): runtimebench's raw-client and ledger-off-batched rows, so
// batched / rawclientbatch is `switchyard bench runtime`'s same-shape
// ratio (the raw-client modes skip on embedded, which has no client of
// its own, and rawclientbatch on asynq, which has no batch enqueue). b.N
// counts tasks.
//
//	go test ./internal/integration -run '^$' -bench Runtime_LedgerOff -benchtime 20000x -count 3
func BenchmarkRuntime_LedgerOff(b *testing.B) {
	for _, kind := range benchBrokers() {
		b.Run("broker="+kind+"/mode=runtime", func(b *testing.B) { benchRuntime(b, kind, false) })
		b.Run("broker="+kind+"/mode=bulk", func(b *testing.B) { benchRuntime(b, kind, true) })
		b.Run("broker="+kind+"/mode=enqueue", func(b *testing.B) { benchEnqueueOnly(b, kind, false) })
		b.Run("broker="+kind+"/mode=publish", func(b *testing.B) { benchEnqueueOnly(b, kind, true) })
		b.Run("broker="+kind+"/mode=drain", func(b *testing.B) { benchDrain(b, kind) })
		for _, row := range []struct {
			name string
			mode runtimebench.Mode
		}{{"rawclient", runtimebench.RawClient}, {"rawclientbatch", runtimebench.RawClientBatched}, {"batched", runtimebench.LedgerOffBatched}} {
			b.Run("broker="+kind+"/mode="+row.name, func(b *testing.B) {
				u := testclean.URL(b, kind, conformance.Namespace(b), nil) // Run replaces the namespace with its own
				runBenchRow(b, runtimebench.Config{BrokerURL: u, Tasks: b.N, Slots: 64, Prefetch: 128, Timeout: 5 * time.Minute}, row.mode)
			})
		}
		b.Run("broker="+kind+"/mode=loop", func(b *testing.B) {
			ctx := context.Background()
			br := openBenchBroker(b, kind)
			b.ResetTimer()
			cpu := cpuTime()
			r, err := benchkit.EndToEnd(ctx, br, "batch", b.N, 64, 100, 8)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.PerSecond(), "tasks/s")
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/task")
		})
	}
}

func openBenchBroker(b *testing.B, kind string) *broker.Broker {
	b.Helper()
	u := testclean.URL(b, kind, conformance.Namespace(b), nil)
	br, err := broker.Open(context.Background(), u, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	return br
}

// noopServer is the benchmarks' Server (Slots 64, Prefetch 128, no
// retries) with a no-op handler; wait returns when b.N tasks have run
// (and fails the benchmark after 5 minutes).
func noopServer(b *testing.B, br *broker.Broker) (*switchyard.Server, func()) {
	srv, err := switchyard.NewServer(br, &switchyard.ServerConfig{Slots: 64, Prefetch: 128, PollWait: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Retry: scheduler.RetryPolicy{}})
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	all := make(chan struct{})
	n := int64(b.N)
	if err := switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[noopArgs]) error {
		if done.Add(1) == n {
			close(all)
		}
		return nil
	}, nil); err != nil {
		b.Fatal(err)
	}
	return srv, func() {
		select {
		case <-all:
		case <-time.After(5 * time.Minute):
			b.Fatalf("%d of %d tasks done after 5 minutes", done.Load(), b.N)
		}
	}
}

// enqueueNoops enqueues b.N no-op tasks with EnqueueMany, 1,000 a call.
func enqueueNoops(ctx context.Context, b *testing.B, client *switchyard.Client, payload string) {
	for sent := 0; sent < b.N; {
		items := make([]switchyard.EnqueueItem, min(1000, b.N-sent))
		for i := range items {
			items[i] = switchyard.EnqueueItem{Args: noopArgs{Payload: payload}}
		}
		rs, err := client.EnqueueMany(ctx, items)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rs {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
		sent += len(items)
	}
}

// benchRuntime enqueues b.N tasks one per Enqueue call from 8 goroutines,
// or with bulk in EnqueueMany calls of up to 1,000 from one.
func benchRuntime(b *testing.B, kind string, bulk bool) {
	ctx := context.Background()
	br := openBenchBroker(b, kind)
	client, _ := switchyard.NewClient(br, nil)
	srv, waitAll := noopServer(b, br)
	payload := fmt.Sprintf("%064d", 0)
	b.ResetTimer()
	cpu := cpuTime()
	start := time.Now()
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	if bulk {
		enqueueNoops(ctx, b, client, payload)
	}
	publishers := 8
	if bulk {
		publishers = 0
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := client.Enqueue(ctx, noopArgs{Payload: payload}, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	waitAll()
	el := time.Since(start)
	b.StopTimer()
	_ = srv.Stop(ctx)
	b.ReportMetric(float64(b.N)/el.Seconds(), "tasks/s")
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/task")
}

// benchEnqueueOnly is the runtime's publishing half alone: b.N tasks, one
// per Client.Enqueue call (or, with raw, one per broker.Broker.PublishOne
// call, without the client) from 8 goroutines, and no Server. It shows
// how much of the runtime's time the publishers' round trips set.
func benchEnqueueOnly(b *testing.B, kind string, raw bool) {
	ctx := context.Background()
	br := openBenchBroker(b, kind)
	client, _ := switchyard.NewClient(br, nil)
	payload := fmt.Sprintf("%064d", 0)
	body := []byte(`{"p":"` + payload + `"}`)
	n := int64(b.N)
	b.ResetTimer()
	cpu := cpuTime()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= n {
				var err error
				if raw {
					_, err = br.PublishOne(ctx, &broker.Message{Lane: "default", Kind: "bench.noop", Body: body})
				} else {
					_, err = client.Enqueue(ctx, noopArgs{Payload: payload}, nil)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "tasks/s")
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/task")
}

// benchDrain is the runtime's consuming half alone: b.N tasks are
// enqueued (EnqueueMany, untimed), then a Server (Slots 64, Prefetch 128)
// runs them with a no-op handler and acks them.
func benchDrain(b *testing.B, kind string) {
	ctx := context.Background()
	br := openBenchBroker(b, kind)
	client, _ := switchyard.NewClient(br, nil)
	srv, waitAll := noopServer(b, br)
	payload := fmt.Sprintf("%064d", 0)
	enqueueNoops(ctx, b, client, payload)
	b.ResetTimer()
	cpu := cpuTime()
	start := time.Now()
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	waitAll()
	el := time.Since(start)
	b.StopTimer()
	_ = srv.Stop(ctx)
	b.ReportMetric(float64(b.N)/el.Seconds(), "tasks/s")
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/task")
}

// cpuTime is the CPU time (user and system) the process has used: unlike
// a rate, it barely moves with the load of a shared machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRuntime_Latency measures enqueue → handler start through the
// runtime, ledger off, with tasks enqueued one per Client.Enqueue call at a
// fixed rate (200 and 1,000 tasks/s). b.N counts tasks; the metrics are
// the median and 99th percentile in milliseconds.
//
//	go test ./internal/integration -run '^$' -bench Runtime_Latency -benchtime 2000x
func BenchmarkRuntime_Latency(b *testing.B) {
	for _, kind := range benchBrokers() {
		for _, rate := range []int{200, 1000} {
			b.Run(fmt.Sprintf("broker=%s/rate=%d", kind, rate), func(b *testing.B) { benchLatency(b, kind, rate) })
		}
	}
}

type latArgs struct {
	At int64 `json:"at"` // when Enqueue was called, Unix nanoseconds
}

func (latArgs) Kind() string { return "bench.latency" }

func benchLatency(b *testing.B, kind string, rate int) {
	ctx := context.Background()
	br := openBenchBroker(b, kind)
	client, _ := switchyard.NewClient(br, nil)
	srv, err := switchyard.NewServer(br, &switchyard.ServerConfig{Slots: 64, Prefetch: 128, PollWait: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Retry: scheduler.RetryPolicy{}})
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	var mu sync.Mutex
	all := make(chan struct{})
	_ = switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[latArgs]) error {
		d := time.Since(time.Unix(0, t.Args.At))
		mu.Lock()
		lat = append(lat, d)
		if len(lat) == b.N {
			close(all)
		}
		mu.Unlock()
		return nil
	}, nil)
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer srv.Stop(ctx)
	time.Sleep(200 * time.Millisecond) // let the receivers start waiting
	b.ResetTimer()
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		if _, err := client.Enqueue(ctx, latArgs{At: time.Now().UnixNano()}, nil); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d tasks started after a minute", len(lat), b.N)
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
}
