package migrate_test

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// The shared RabbitMQ and NATS keep what the tests create, and RabbitMQ
// stops accepting connections at a few hundred quorum queues on these
// machines: every test removes its namespace's queues and streams.

// rabbitCtlMu serialises rabbitmqctl calls (each starts an Erlang VM).
var rabbitCtlMu sync.Mutex

func cleanupRabbitMQ(t *testing.T, ns string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		rabbitCtlMu.Lock()
		out, err := exec.CommandContext(ctx, "rabbitmqctl", "list_queues", "-q", "name").Output()
		rabbitCtlMu.Unlock()
		if err != nil {
			t.Logf("cleanup: cannot list RabbitMQ queues (%v); namespace %s left behind", err, ns)
			return
		}
		conn, err := amqp.Dial(testenv.RabbitMQ.Endpoint(t))
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		defer conn.Close()
		for _, name := range strings.Fields(string(out)) {
			if !strings.Contains(name, "."+ns+".") && !strings.HasSuffix(name, "."+ns) {
				continue
			}
			ch, err := conn.Channel()
			if err != nil {
				return
			}
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.Close()
		}
	})
}

func cleanupNATS(t *testing.T, ns string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		nc, err := natsgo.Connect(testenv.NATS.Endpoint(t))
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return
		}
		names := js.StreamNames(ctx)
		var doomed []string
		for n := range names.Name() {
			if strings.Contains(strings.ToLower(n), strings.ToLower(ns)) {
				doomed = append(doomed, n)
			}
		}
		for _, n := range doomed {
			_ = js.DeleteStream(ctx, n)
		}
	})
}
