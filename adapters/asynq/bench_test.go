package asynq_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	asynqadapter "github.com/switchyard-dev/switchyard/adapters/asynq"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// BenchmarkVsAsynq compares, in one process and one run, Switchyard on
// asynq's layout (through broker.Broker: publish 1 KiB in batches, receive
// in batches, ack) with asynq's own Client and Server (no-op handler,
// Concurrency 20) on the same Redis, for TaskCheckInterval 10ms and the
// default 1s:
//
//   - e2e: N messages published while consumers run, until the last is acked;
//   - drain: N messages already queued, consumed until the last is acked;
//   - latency: 1,000 msgs/s paced for BENCH_LAT_N messages, publish to
//     handler start, p50 and p99.
//
// Run it once, not b.N times:
//
//	go test ./adapters/asynq/ -run '^$' -bench BenchmarkVsAsynq -benchtime 1x
//
// BENCH_N (default 20000), BENCH_LAT_N (default 3000) and BENCH_ROUNDS
// (default 3; medians are reported) set the sizes.
func BenchmarkVsAsynq(b *testing.B) {
	addr := testenv.Redis.Endpoint(b)
	n := envInt("BENCH_N", 20000)
	latN := envInt("BENCH_LAT_N", 3000)
	rounds := envInt("BENCH_ROUNDS", 3)
	body := make([]byte, 1024)
	for i := 0; i < b.N; i++ {
		// The machine is shared: rounds alternate the contenders and the
		// medians are reported, so a burst of load elsewhere does not land
		// on one side only.
		var sy, syDrain, aq10, aq10Drain, aqDef []float64
		for r := 0; r < rounds; r++ {
			sy = append(sy, syThroughput(b, addr, n, body, false))
			aq10 = append(aq10, asynqThroughput(b, addr, n, body, 10*time.Millisecond, false))
			aqDef = append(aqDef, asynqThroughput(b, addr, n, body, 0, false))
			aq10Drain = append(aq10Drain, asynqThroughput(b, addr, n, body, 10*time.Millisecond, true))
			syDrain = append(syDrain, syThroughput(b, addr, n, body, true))
			b.Logf("round %d: e2e sy %.0f asynq10ms %.0f asynqdef %.0f; drain sy %.0f asynq10ms %.0f msgs/s",
				r+1, sy[r], aq10[r], aqDef[r], syDrain[r], aq10Drain[r])
		}
		m := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
		b.ReportMetric(m(sy), "sy_e2e_msgs/s")
		b.ReportMetric(m(aq10), "asynq10ms_e2e_msgs/s")
		b.ReportMetric(m(aqDef), "asynqdef_e2e_msgs/s")
		b.ReportMetric(m(sy)/m(aq10), "ratio_e2e_vs_10ms")
		b.ReportMetric(m(sy)/m(aqDef), "ratio_e2e_vs_default")
		b.ReportMetric(m(syDrain), "sy_drain_msgs/s")
		b.ReportMetric(m(aq10Drain), "asynq10ms_drain_msgs/s")
		b.ReportMetric(m(syDrain)/m(aq10Drain), "ratio_drain_vs_10ms")

		syP50, syP99 := syLatency(b, addr, latN, body)
		a10P50, a10P99 := asynqLatency(b, addr, latN, body, 10*time.Millisecond)
		adP50, adP99 := asynqLatency(b, addr, latN, body, 0)
		b.ReportMetric(syP50, "sy_p50_ms")
		b.ReportMetric(syP99, "sy_p99_ms")
		b.ReportMetric(a10P50, "asynq10ms_p50_ms")
		b.ReportMetric(a10P99, "asynq10ms_p99_ms")
		b.ReportMetric(adP50, "asynqdef_p50_ms")
		b.ReportMetric(adP99, "asynqdef_p99_ms")
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func benchNS(b *testing.B, addr string) string {
	ns := conformance.Namespace(b)
	b.Cleanup(func() { cleanupNamespace(addr, ns) })
	return ns
}

// syThroughput runs Switchyard: 2 publishers (batches of 100) and 4
// consumers (receive up to 100, ack the batch). With prefill, the queue is
// filled first and only the consuming is timed.
func syThroughput(b *testing.B, addr string, n int, body []byte, prefill bool) float64 {
	ns := benchNS(b, addr)
	ctx := context.Background()
	br, err := broker.Open(ctx, "redis://"+addr+"/0?namespace="+ns, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	const publishers, consumers, batch = 2, 4, 100
	publish := func() {
		var wg sync.WaitGroup
		for p := 0; p < publishers; p++ {
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				for i := p * batch; i < n; i += publishers * batch {
					msgs := make([]*broker.Message, 0, batch)
					for j := i; j < min(i+batch, n); j++ {
						msgs = append(msgs, &broker.Message{Lane: "batch", Kind: "bench.noop", Body: body})
					}
					// Publish assigns IDs in place, so a retry after a
					// transient or unknown-outcome error re-sends the same
					// messages and is reported as duplicates where they landed.
					for try := 0; ; try++ {
						rs, err := br.Publish(ctx, msgs...)
						var failed []*broker.Message
						for k, r := range rs {
							if r.Err != nil {
								err = r.Err
								failed = append(failed, msgs[k])
							}
						}
						if err == nil {
							break
						}
						if try == 20 || broker.ClassOf(err) == broker.Permanent {
							b.Error(err)
							return
						}
						if len(failed) > 0 {
							msgs = failed
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
			}(p)
		}
		wg.Wait()
	}
	if prefill {
		publish()
	}
	var got atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < consumers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for got.Load() < int64(n) {
				ds, err := br.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: batch, Lease: time.Minute, Wait: 200 * time.Millisecond})
				if err != nil {
					if broker.ClassOf(err) == broker.Permanent {
						b.Error(err)
						return
					}
					continue // transient (a loaded machine): try again
				}
				if len(ds) == 0 {
					continue
				}
				for try := 0; ; try++ {
					err := br.Ack(ctx, ds...)
					if err == nil || errors.Is(err, broker.ErrLeaseLost) {
						break
					}
					if try == 20 || broker.ClassOf(err) == broker.Permanent {
						b.Error(err)
						return
					}
				}
				got.Add(int64(len(ds)))
			}
		}()
	}
	if !prefill {
		publish()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// asynqThroughput runs asynq's Client (8 enqueuing goroutines, one task a
// round trip, as asynq offers no batch enqueue) and Server (Concurrency 20,
// no-op handler). tci 0 means asynq's default TaskCheckInterval (1s).
func asynqThroughput(b *testing.B, addr string, n int, body []byte, tci time.Duration, prefill bool) float64 {
	q := asynqadapter.QueueName(benchNS(b, addr), "batch")
	cl := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
	defer cl.Close()
	enqueue := func() {
		var wg sync.WaitGroup
		const enqueuers = 8
		for e := 0; e < enqueuers; e++ {
			wg.Add(1)
			go func(e int) {
				defer wg.Done()
				for i := e; i < n; i += enqueuers {
					// Explicit task IDs make asynq's own retry of a slow
					// enqueue (go-redis retries by default) recognisable.
					id := fmt.Sprintf("t-%d", i)
					for try := 0; ; try++ {
						_, err := cl.Enqueue(asynq.NewTask("bench.noop", body), asynq.Queue(q), asynq.TaskID(id))
						if err == nil || errors.Is(err, asynq.ErrTaskIDConflict) {
							break
						}
						if try == 20 {
							b.Error(err)
							return
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
			}(e)
		}
		wg.Wait()
	}
	if prefill {
		enqueue()
	}
	var got atomic.Int64
	done := make(chan struct{})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, asynq.Config{
		Concurrency: 20, Queues: map[string]int{q: 1}, TaskCheckInterval: tci, Logger: quietLogger{}, LogLevel: asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("bench.noop", func(context.Context, *asynq.Task) error {
		if got.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		b.Fatal(err)
	}
	if !prefill {
		enqueue()
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("asynq processed %d of %d", got.Load(), n)
	}
	el := time.Since(start)
	srv.Shutdown()
	return float64(n) / el.Seconds()
}

// paced publishes n messages at 1,000/s with the send time in the body.
func paced(n int, body []byte, send func(body []byte)) {
	start := time.Now()
	for i := 0; i < n; i++ {
		if d := time.Until(start.Add(time.Duration(i) * time.Millisecond)); d > 0 {
			time.Sleep(d)
		}
		bb := slices.Clone(body)
		binary.LittleEndian.PutUint64(bb, uint64(time.Now().UnixNano()))
		send(bb)
	}
}

func percentiles(lat []time.Duration) (p50, p99 float64) {
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ms(lat[len(lat)*50/100]), ms(lat[min(len(lat)*99/100, len(lat)-1)])
}

func sentAt(body []byte) time.Time {
	return time.Unix(0, int64(binary.LittleEndian.Uint64(body)))
}

func syLatency(b *testing.B, addr string, n int, body []byte) (float64, float64) {
	ns := benchNS(b, addr)
	ctx := context.Background()
	br, err := broker.Open(ctx, "redis://"+addr+"/0?namespace="+ns, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	var wg sync.WaitGroup
	for c := 0; c < 2; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := len(lat) >= n
				mu.Unlock()
				if done {
					return
				}
				ds, err := br.Receive(ctx, broker.ReceiveRequest{Lane: "interactive", Max: 100, Lease: time.Minute, Wait: 200 * time.Millisecond})
				if err != nil {
					if broker.ClassOf(err) == broker.Permanent {
						b.Error(err)
						return
					}
					continue
				}
				now := time.Now()
				mu.Lock()
				for _, d := range ds {
					if d.Attempt == 1 {
						lat = append(lat, now.Sub(sentAt(d.Body)))
					}
				}
				mu.Unlock()
				if len(ds) > 0 {
					_ = br.Ack(ctx, ds...) // a lost ack only redelivers; latency counts first deliveries
				}
			}
		}()
	}
	paced(n, body, func(bb []byte) {
		m := &broker.Message{Lane: "interactive", Kind: "bench.noop", Body: bb}
		for try := 0; ; try++ {
			_, err := br.PublishOne(ctx, m)
			if err == nil {
				return
			}
			if try == 20 || broker.ClassOf(err) == broker.Permanent {
				b.Error(err)
				return
			}
		}
	})
	wg.Wait()
	return percentiles(lat)
}

func asynqLatency(b *testing.B, addr string, n int, body []byte, tci time.Duration) (float64, float64) {
	q := asynqadapter.QueueName(benchNS(b, addr), "interactive")
	cl := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
	defer cl.Close()
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	done := make(chan struct{})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, asynq.Config{
		Concurrency: 20, Queues: map[string]int{q: 1}, TaskCheckInterval: tci, Logger: quietLogger{}, LogLevel: asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("bench.noop", func(_ context.Context, t *asynq.Task) error {
		now := time.Now()
		mu.Lock()
		lat = append(lat, now.Sub(sentAt(t.Payload())))
		if len(lat) == n {
			close(done)
		}
		mu.Unlock()
		return nil
	})
	if err := srv.Start(mux); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	// Let the server reach its idle polling state, as in steady operation.
	time.Sleep(1500 * time.Millisecond)
	i := 0
	paced(n, body, func(bb []byte) {
		i++
		id := fmt.Sprintf("l-%d", i)
		for try := 0; ; try++ {
			_, err := cl.Enqueue(asynq.NewTask("bench.noop", bb), asynq.Queue(q), asynq.TaskID(id))
			if err == nil || errors.Is(err, asynq.ErrTaskIDConflict) {
				return
			}
			if try == 20 {
				b.Error(err)
				return
			}
		}
	})
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatal(fmt.Sprintf("asynq handled %d of %d", len(lat), n))
	}
	mu.Lock()
	defer mu.Unlock()
	return percentiles(lat)
}
