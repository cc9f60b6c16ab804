package runtimebench

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/internal/testclean"
)

// TestCleanNamespace_RabbitMQDelayQueues: a run that delayed tasks
// (--delay, retries with backoff) created delay queues; CleanNamespace
// removes them with the work and dead-letter queues. Before, every
// delayed run left its delay queues (quorum queues since the eleventh
// pass) on the broker.
func TestCleanNamespace_RabbitMQDelayQueues(t *testing.T) {
	ns := NewNamespace("sycleant")
	testclean.RabbitMQ(t, ns) // in case the test fails half way
	u := testclean.URL(t, "rabbitmq", ns, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Open(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, d := range []time.Duration{50 * time.Millisecond, 3 * time.Second, time.Hour} {
		if _, err := b.PublishOne(ctx, &broker.Message{Lane: "scheduled", Kind: "k", Body: []byte("x"), RunAt: now.Add(d)}); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	queues := []string{"switchyard." + ns + ".scheduled", "switchyard." + ns + ".scheduled.delay.100ms",
		"switchyard." + ns + ".scheduled.delay.3200ms", "switchyard." + ns + ".scheduled.delay.6553600ms"}
	exists := func(q string) bool {
		conn, err := amqp.Dial(testenv.RabbitMQ.Endpoint(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return err == nil
	}
	for _, q := range queues {
		if !exists(q) {
			t.Fatalf("queue %s was not created; the test's names are out of date", q)
		}
	}
	CleanNamespace(u, ns, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, q := range queues {
		if exists(q) {
			t.Errorf("queue %s is left after CleanNamespace", q)
		}
	}
}
