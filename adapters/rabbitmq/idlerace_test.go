package rabbitmq

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestIdleRelease_PublishRace: a message published to a lane at the
// instant the idle release gives up a consumer tag that still has credit
// is delivered with attempt 1. A quorum queue returns a message it was
// pushing to a tag when the tag is cancelled, with x-delivery-count
// raised, without the client ever seeing it (RabbitMQ 3.10's
// rabbit_fifo_client returns deliveries for a consumer tag it no longer
// knows); the idle release must not cancel a tag while a delivery may be
// in flight to it.
//
// Each round leaves a tag with open credit (a Receive that timed out),
// starts a publish and runs the idle release a little later (the delay
// swept over a few milliseconds), so that the enqueue and the release
// meet. Before the fix 2–7 rounds of 100 spent an attempt in every run
// (idle-release), 3–17 (poll).
func TestIdleRelease_PublishRace(t *testing.T) {
	t.Run("idle-release", func(t *testing.T) {
		publishRace(t, func(ctx context.Context, d *Driver, c *consumer) []*broker.Delivery {
			c.idleRelease()
			return nil
		})
	})
	// A Receive with Wait 0 (basic.get) used to cancel every tag first.
	t.Run("poll", func(t *testing.T) {
		publishRace(t, func(ctx context.Context, d *Driver, c *consumer) []*broker.Delivery {
			ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 1, Lease: time.Minute})
			if err != nil {
				t.Fatalf("poll: %v", err)
			}
			return ds
		})
	})
}

// publishRace runs the rounds of TestIdleRelease_PublishRace with release
// as what meets the publish (it may return the message).
func publishRace(t *testing.T, release func(context.Context, *Driver, *consumer) []*broker.Delivery) {
	// The test runs the release itself.
	u := testURL(t, newNS(t), "", "", url.Values{"idle_release": {"10m"}})
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	d := openDriver(t, u)
	ctx := ctxT(t, 2*time.Minute)
	c, err := d.consumer("work", false)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 100
	bad := 0
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < rounds && time.Now().Before(deadline); i++ {
		// A Receive that times out leaves a tag with open credit.
		if ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 1, Wait: 5 * time.Millisecond, Lease: time.Minute}); err != nil || len(ds) != 0 {
			t.Fatalf("round %d: empty receive = %d, %v", i, len(ds), err)
		}
		m := &broker.Message{ID: broker.NewID(), Lane: "work", Kind: "k", Body: []byte("x"), EnqueuedAt: time.Now()}
		published := make(chan error, 1)
		go func() {
			_, err := d.Publish(context.Background(), []*broker.Message{m})
			published <- err
		}()
		delay := time.Duration(i%16) * 250 * time.Microsecond
		time.Sleep(delay)
		got := release(ctx, d, c)
		if err := <-published; err != nil {
			t.Fatalf("round %d: publish: %v", i, err)
		}
		var dv *broker.Delivery
		if len(got) > 0 {
			dv = got[0]
		} else {
			dv = receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, 10*time.Second)
		}
		if dv == nil || dv.ID != m.ID {
			t.Fatalf("round %d: got %v, want %s", i, dv, m.ID)
		}
		if dv.Attempt != 1 {
			bad++
			t.Errorf("round %d (release %v after the publish started): attempt %d, want 1", i, delay, dv.Attempt)
		}
		if err := d.Ack(ctx, []*broker.Delivery{dv}); err != nil {
			t.Fatal(err)
		}
	}
	if bad > 0 {
		t.Logf("%d rounds of %d spent an attempt", bad, rounds)
	}
}

// TestIdleRelease_DrainEnds: a draining tag that is the queue's only
// consumer gets the copies it republishes back until its credit is used
// up; then it is cancelled, and the message is delivered with attempt 1.
func TestIdleRelease_DrainEnds(t *testing.T) {
	u := testURL(t, newNS(t), "", "", url.Values{"idle_release": {"10m"}})
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	d := openDriver(t, u)
	ctx := ctxT(t, time.Minute)
	c, err := d.consumer("work", false)
	if err != nil {
		t.Fatal(err)
	}
	// A tag with credit 4, idle.
	if ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 4, Wait: 5 * time.Millisecond, Lease: time.Minute}); err != nil || len(ds) != 0 {
		t.Fatalf("empty receive = %d, %v", len(ds), err)
	}
	c.idleRelease()
	c.mu.Lock()
	draining := len(c.draining)
	c.mu.Unlock()
	if draining != 1 {
		t.Fatalf("%d draining tags after the idle release, want 1", draining)
	}
	m := &broker.Message{ID: broker.NewID(), Lane: "work", Kind: "k", Body: []byte("x"), EnqueuedAt: time.Now()}
	mustPublish(t, d, m)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		tags, held := len(c.tags), len(c.held)
		c.mu.Unlock()
		if tags == 0 && held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the draining tag is still running (%d tags, %d holding) after 10 s", tags, held)
		}
		time.Sleep(10 * time.Millisecond)
	}
	dv := receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, 10*time.Second)
	if dv == nil || dv.ID != m.ID || dv.Attempt != 1 {
		t.Fatalf("got %+v, want %s at attempt 1", dv, m.ID)
	}
	if err := d.Ack(ctx, []*broker.Delivery{dv}); err != nil {
		t.Fatal(err)
	}
	if ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 4, Wait: 300 * time.Millisecond, Lease: time.Minute}); err != nil || len(ds) != 0 {
		t.Fatalf("after the ack: %d deliveries, %v; want none (one copy only)", len(ds), err)
	}
}
