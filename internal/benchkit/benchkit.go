// Package benchkit measures brokers the same way everywhere: the
// `switchyard bench` command and the adapters' `go test -bench` benchmarks
// call it, so their figures compare.
package benchkit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Result is one measured run.
type Result struct {
	Messages int
	Elapsed  time.Duration
}

// PerSecond is the throughput.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Elapsed.Seconds()
}

func (r Result) String() string {
	return fmt.Sprintf("%d messages in %s: %.0f msgs/s", r.Messages, r.Elapsed.Round(time.Millisecond), r.PerSecond())
}

// Publish publishes n messages of size bytes to lane in batches.
func Publish(ctx context.Context, b *broker.Broker, lane string, n, size, batch int) (Result, error) {
	body := make([]byte, size)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	start := time.Now()
	msgs := make([]*broker.Message, 0, batch)
	for sent := 0; sent < n; {
		msgs = msgs[:0]
		for i := 0; i < batch && sent+i < n; i++ {
			msgs = append(msgs, &broker.Message{Lane: lane, Kind: "bench.noop", Body: body})
		}
		rs, err := b.Publish(ctx, msgs...)
		if err != nil {
			return Result{}, err
		}
		for _, r := range rs {
			if r.Err != nil {
				return Result{}, r.Err
			}
		}
		sent += len(msgs)
	}
	return Result{Messages: n, Elapsed: time.Since(start)}, nil
}

// Consume receives and acks n messages from lane with `consumers`
// concurrent loops, each receiving up to batch at a time.
func Consume(ctx context.Context, b *broker.Broker, lane string, n, batch, consumers int) (Result, error) {
	start := time.Now()
	var mu sync.Mutex
	got := 0
	var firstErr error
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for c := 0; c < consumers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: batch, Lease: time.Minute, Wait: 200 * time.Millisecond})
				if err == nil && len(ds) > 0 {
					err = b.Ack(ctx, ds...)
				}
				mu.Lock()
				if err != nil && firstErr == nil && ctx.Err() == nil {
					firstErr = err
				}
				got += len(ds)
				done := got >= n || firstErr != nil
				mu.Unlock()
				if done {
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return Result{}, firstErr
	}
	return Result{Messages: got, Elapsed: time.Since(start)}, nil
}

// EndToEnd publishes n messages while consumers receive and ack them, and
// measures from the first publish to the last ack.
func EndToEnd(ctx context.Context, b *broker.Broker, lane string, n, size, batch, consumers int) (Result, error) {
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := Publish(ctx, b, lane, n, size, batch)
		errc <- err
	}()
	r, err := Consume(ctx, b, lane, n, batch, consumers)
	if perr := <-errc; perr != nil {
		return Result{}, perr
	}
	if err != nil {
		return Result{}, err
	}
	return Result{Messages: r.Messages, Elapsed: time.Since(start)}, nil
}

// Stream is the adapters' raw-client comparison workload through
// broker.Broker: it declares lane with one warm-up message outside the
// measurement, then publishes n messages of size bytes in batches of
// pubBatch while one consumer receives up to recvBatch at a time and acks
// each batch, and measures from the first publish to the last ack.
func Stream(ctx context.Context, b *broker.Broker, lane string, n, size, pubBatch, recvBatch int) (Result, error) {
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: lane, Kind: "warm.up"}); err != nil {
		return Result{}, fmt.Errorf("warm-up publish: %w", err)
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 1, Wait: 5 * time.Second})
	if err != nil {
		return Result{}, fmt.Errorf("warm-up receive: %w", err)
	}
	if len(ds) != 1 {
		return Result{}, fmt.Errorf("warm-up receive: got %d messages, want 1", len(ds))
	}
	if err := b.Ack(ctx, ds...); err != nil {
		return Result{}, fmt.Errorf("warm-up ack: %w", err)
	}
	body := make([]byte, size)
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = &broker.Message{Lane: lane, Kind: "bench.noop", Body: body}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	consumed := make(chan error, 1)
	go func() {
		for got := 0; got < n; {
			ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: recvBatch, Lease: time.Minute, Wait: time.Second})
			if err == nil {
				err = b.Ack(ctx, ds...)
			}
			if err != nil {
				consumed <- err
				return
			}
			got += len(ds)
		}
		consumed <- nil
	}()
	for i := 0; i < n; i += pubBatch {
		rs, err := b.Publish(ctx, msgs[i:min(i+pubBatch, n)]...)
		if err == nil {
			for _, r := range rs {
				if r.Err != nil {
					err = r.Err
					break
				}
			}
		}
		if err != nil {
			cancel()
			<-consumed
			return Result{}, err
		}
	}
	if err := <-consumed; err != nil {
		return Result{}, err
	}
	return Result{Messages: n, Elapsed: time.Since(start)}, nil
}
