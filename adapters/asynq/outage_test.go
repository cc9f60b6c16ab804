package asynq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/redisproc"
)

// TestOutage_Unresponsive: a Redis that accepts connections but never
// answers (SIGSTOP) makes every call fail within its context deadline with
// a non-permanent error, and work resumes when it answers again.
func TestOutage_Unresponsive(t *testing.T) {
	p := redisproc.Start(t, "everysec")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, p.URL("redis", "namespace=frozen&read_timeout=2s&write_timeout=2s"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", Body: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Minute, Wait: time.Second})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %d, %v", len(ds), err)
	}
	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer p.Thaw()
	calls := map[string]func(context.Context) error{
		"publish": func(c context.Context) error {
			_, err := b.PublishOne(c, &broker.Message{Lane: "batch", Kind: "k", Body: []byte("during")})
			return err
		},
		"receive": func(c context.Context) error {
			_, err := b.Receive(c, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Minute, Wait: 5 * time.Second})
			return err
		},
		"ack":    func(c context.Context) error { return b.Ack(c, ds...) },
		"extend": func(c context.Context) error { return b.Extend(c, time.Minute, ds...) },
		"stats": func(c context.Context) error {
			_, err := b.Stats(c, "batch")
			return err
		},
	}
	for name, call := range calls {
		cctx, ccancel := context.WithTimeout(ctx, 700*time.Millisecond)
		start := time.Now()
		err := call(cctx)
		el := time.Since(start)
		ccancel()
		if err == nil {
			t.Errorf("%s succeeded against a frozen server", name)
		} else if broker.ClassOf(err) == broker.Permanent {
			t.Errorf("%s: %v is permanent, want transient or unknown outcome", name, err)
		}
		if el > 3*time.Second {
			t.Errorf("%s took %s with a 700ms deadline", name, el)
		}
	}
	if err := p.Thaw(); err != nil {
		t.Fatal(err)
	}
	// Work resumes. The ack sent during the freeze may have run once Redis
	// woke up (its outcome was unknown to us): then the lease is gone.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := b.Ack(ctx, ds...)
		if err == nil || errors.Is(err, broker.ErrLeaseLost) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ack after thaw: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s, err := b.Stats(ctx, "batch")
	if err != nil {
		t.Fatal(err)
	}
	if s.InFlight != 0 {
		t.Errorf("after thaw and ack: %+v, want nothing in flight", s)
	}
	t.Logf("after thaw: %+v (a publish whose outcome was unknown may or may not have landed)", s)
}
