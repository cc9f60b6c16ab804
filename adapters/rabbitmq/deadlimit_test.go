package rabbitmq

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// queueArguments returns rabbitmqctl's rendering of queue name's arguments.
func queueArguments(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", "list_queues", "-q", "--no-table-headers", "name", "arguments").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return line
		}
	}
	t.Fatalf("queue %s not listed", name)
	return ""
}

// TestDeadQueueHasNoDeliveryLimit: listing dead letters hands them back
// with a requeue, which raises x-delivery-count; from RabbitMQ 4.0 a quorum
// queue without x-delivery-limit drops a message after 20 of them. The
// dead-letter queue is declared with a limit no listing reaches.
func TestDeadQueueHasNoDeliveryLimit(t *testing.T) {
	needCtl(t)
	ns := newNS(t)
	u := testURL(t, ns, "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, "batch") })
	ctx := context.Background()
	b, err := broker.Open(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	args := queueArguments(t, "switchyard."+ns+".batch.dlq")
	if !strings.Contains(args, "x-delivery-limit") || !strings.Contains(args, "2147483647") {
		t.Fatalf("dead-letter queue arguments %q lack x-delivery-limit 2147483647", args)
	}
	// Twenty-five listings later the dead letter is still there.
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Wait: 5 * time.Second})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %d, %v", len(ds), err)
	}
	if err := b.DeadLetter(ctx, ds[0], &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		dead, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Wait: 5 * time.Second, DeadLetters: true})
		if err != nil || len(dead) != 1 {
			t.Fatalf("listing %d: %d dead letters, %v", i, len(dead), err)
		}
		if err := b.Nack(ctx, dead[0], 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeadQueueFromEarlierVersion: a dead-letter queue declared without the
// delivery limit (by an earlier version of the adapter) is used as it is.
func TestDeadQueueFromEarlierVersion(t *testing.T) {
	ns := newNS(t)
	u := testURL(t, ns, "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, "batch") })
	conn, err := amqp.Dial(testenv.RabbitMQ.Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("switchyard."+ns+".batch.dlq", true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := broker.Open(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", Body: []byte("x")}); err != nil {
		t.Fatalf("publish next to an old dead-letter queue: %v", err)
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Wait: 5 * time.Second})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %d, %v", len(ds), err)
	}
	if err := b.DeadLetter(ctx, ds[0], &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	if st, err := b.Stats(ctx, "batch"); err != nil || st.DeadLettered != 1 {
		t.Fatalf("stats %+v, %v; want 1 dead letter", st, err)
	}
}
