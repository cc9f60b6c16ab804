package rabbitmq

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

// A work queue deleted behind the driver's back (an operator, another
// process cleaning up) while the driver still counts it as declared: the
// broker cannot route the next publish. That publish must fail, not be
// confirmed and dropped; the one after it declares the queue again and
// lands.
func TestPublish_UnroutableIsAnError(t *testing.T) {
	ns := newNS(t)
	u := testURL(t, ns, "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, "work", "side") })
	d := openDriver(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msg := func(lane, id string) *broker.Message {
		return &broker.Message{ID: id, Lane: lane, Kind: "k", Body: []byte(`{}`), EnqueuedAt: time.Now()}
	}
	publish := func(id string) error {
		res, err := d.Publish(ctx, []*broker.Message{msg("work", id)})
		if err != nil {
			return err
		}
		return res[0].Err
	}
	if err := publish("first"); err != nil {
		t.Fatalf("first publish: %v", err)
	}
	if _, err := d.Publish(ctx, []*broker.Message{msg("side", "side-0")}); err != nil {
		t.Fatalf("publish to side: %v", err)
	}
	if err := d.withAdmin(ctx, "test", func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(d.cfg.workQueue("work"), false, false, false)
		return err
	}); err != nil {
		t.Fatalf("delete the work queue: %v", err)
	}
	// One call, one channel: the unroutable message is the only one failed.
	res, err := d.Publish(ctx, []*broker.Message{msg("side", "side-1"), msg("work", "lost"), msg("side", "side-2")})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if res[1].Err == nil {
		t.Fatal("a publish to a deleted queue was confirmed: the message is gone")
	}
	if c := broker.ClassOf(res[1].Err); c != broker.Transient {
		t.Errorf("unroutable publish: class %v, want transient (%v)", c, res[1].Err)
	}
	if res[0].Err != nil || res[2].Err != nil {
		t.Errorf("routable messages of the same call failed: %v, %v", res[0].Err, res[2].Err)
	}
	if err := publish("again"); err != nil {
		t.Fatalf("publish after the queue was re-declared: %v", err)
	}
	ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: "work", Max: 10, Lease: 30 * time.Second, Wait: 2 * time.Second})
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	if len(ds) != 1 || ds[0].Message.ID != "again" {
		ids := []string{}
		for _, dv := range ds {
			ids = append(ids, dv.Message.ID)
		}
		t.Fatalf("received %v, want [again]", ids)
	}
	if err := d.Ack(ctx, ds); err != nil {
		t.Fatalf("ack: %v", err)
	}
}
