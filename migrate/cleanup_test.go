package migrate_test

import (
	"context"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/adapters/sqs"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// The shared RabbitMQ, NATS, Redis and SQS emulator keep what the tests
// create, and RabbitMQ stops accepting connections at a few hundred quorum
// queues on these machines: every test removes its namespace's queues,
// streams and keys.

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

// cleanupAsynq removes the Redis keys of an asynq namespace.
func cleanupAsynq(t *testing.T, addr, ns string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, "asynq:{"+ns+":*", 1000).Result()
			if err != nil {
				t.Logf("cleanup: %v; namespace %s left behind in Redis", err, ns)
				return
			}
			if len(keys) > 0 {
				c.Unlink(ctx, keys...)
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		members, _ := c.SMembers(ctx, "asynq:queues").Result()
		for _, m := range members {
			if strings.HasPrefix(m, ns+":") {
				c.SRem(ctx, "asynq:queues", m)
			}
		}
	})
}

// cleanupSQS deletes the queues of an SQS namespace.
func cleanupSQS(t *testing.T, rawURL, ns string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		u, err := url.Parse(rawURL + "&create=false")
		if err != nil {
			return
		}
		d, err := sqs.Open(ctx, u)
		if err != nil {
			t.Logf("cleanup: %v; namespace %s left behind in SQS", err, ns)
			return
		}
		defer d.Close()
		out, err := d.Client().ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(ns + "_"), MaxResults: aws.Int32(1000)})
		if err != nil {
			t.Logf("cleanup: %v; namespace %s left behind in SQS", err, ns)
			return
		}
		for _, q := range out.QueueUrls {
			_, _ = d.Client().DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(q)})
		}
	})
}
