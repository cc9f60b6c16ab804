package embedded_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// BenchmarkRuntimeShape replays, on one goroutine, the driver calls the
// runtime makes at full speed with the ledger off (measured in
// BenchmarkRuntime_LedgerOff: publishes of ~4 small messages, receives of
// ~16, acks of ~32): the writer's cost per task without the scheduling
// noise of the whole runtime. b.N counts messages; cpu-µs/msg is the
// process's CPU time per message.
//
//	go test ./adapters/embedded/ -run '^$' -bench RuntimeShape -benchtime 40000x -count 3
func BenchmarkRuntimeShape(b *testing.B) {
	br := openBench(b)
	ctx := context.Background()
	body := []byte(fmt.Sprintf(`{"p":"%064d"}`, 0))
	var pending []*broker.Delivery
	b.ResetTimer()
	cpu := cpuTime()
	start := time.Now()
	received := 0
	for sent := 0; received < b.N; {
		if sent < b.N {
			n := min(4, b.N-sent)
			msgs := make([]*broker.Message, n)
			for i := range msgs {
				msgs[i] = &broker.Message{Lane: "default", Kind: "bench.noop", Body: body}
			}
			if _, err := br.Publish(ctx, msgs...); err != nil {
				b.Fatal(err)
			}
			sent += n
		}
		if sent%16 == 0 || sent >= b.N {
			ds, err := br.Receive(ctx, broker.ReceiveRequest{Lane: "default", Max: 16, Lease: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			received += len(ds)
			pending = append(pending, ds...)
		}
		if len(pending) >= 32 || received >= b.N {
			if err := br.Ack(ctx, pending...); err != nil {
				b.Fatal(err)
			}
			pending = pending[:0]
		}
	}
	el := time.Since(start)
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/msg")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
