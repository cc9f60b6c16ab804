// Package testclean removes what tests leave on the shared brokers: the
// queues, streams and keys of one test namespace. The shared RabbitMQ,
// NATS, Redis and SQS emulator keep what the tests create, and RabbitMQ
// stops accepting connections at a few hundred quorum queues on the test
// machines, so every test that opens a namespace on them removes it.
//
// Each function registers its removal with t.Cleanup; removal is best
// effort and logs what it could not remove.
package testclean

import (
	"context"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/adapters/postgres"
	"github.com/switchyard-dev/switchyard/adapters/sqs"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/internal/testclean/pubsubclean"
)

// URL returns a URL of the named adapter ("embedded", "rabbitmq", "nats",
// "asynq", "redisstreams", "sqs", "postgres", "gcppubsub") for namespace ns
// with the extra query parameters, and
// registers the removal of what the test creates there. It skips (or fails
// under SWITCHYARD_REQUIRE_BROKERS=1) when the broker is unavailable.
func URL(t testing.TB, kind, ns string, extra url.Values) string {
	t.Helper()
	q := url.Values{}
	for k, v := range extra {
		q[k] = v
	}
	q.Set("namespace", ns)
	switch kind {
	case "embedded":
		return "embedded://" + filepath.Join(t.TempDir(), "q.db") + "?" + q.Encode()
	case "rabbitmq":
		u, err := url.Parse(testenv.RabbitMQ.Endpoint(t))
		if err != nil {
			t.Fatal("RabbitMQ endpoint does not parse")
		}
		if u.Scheme == "amqp" {
			u.Scheme = "rabbitmq"
		}
		u.RawQuery = q.Encode()
		RabbitMQ(t, ns)
		return u.String()
	case "nats":
		endpoint := testenv.NATS.Endpoint(t)
		NATS(t, endpoint, ns)
		return strings.TrimSuffix(endpoint, "/") + "/?" + q.Encode()
	case "asynq":
		addr := testenv.Redis.Endpoint(t)
		Asynq(t, addr, ns)
		return "redis://" + addr + "/0?" + q.Encode()
	case "postgres":
		dsn := testenv.Postgres.Endpoint(t)
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal("PostgreSQL endpoint does not parse")
		}
		for k, v := range u.Query() {
			q[k] = v
		}
		u.RawQuery = q.Encode()
		Postgres(t, dsn, postgres.SchemaFor(ns))
		return u.String()
	case "redisstreams":
		addr := testenv.Redis.Endpoint(t)
		RedisStreams(t, addr, ns)
		return "redis-streams://" + addr + "/0?" + q.Encode()
	case "sqs":
		q.Set("region", "us-east-1")
		q.Set("endpoint", testenv.SQS.Endpoint(t))
		u := "sqs://?" + q.Encode()
		SQS(t, u, ns)
		return u
	case "gcppubsub":
		addr := pubsubclean.PubSubEmulator()
		pubsubclean.GCPPubSub(t, addr, ns)
		return pubsubclean.PubSubURL(addr, ns, extra)
	}
	t.Fatalf("unknown adapter %q", kind)
	return ""
}

// Postgres drops the schema of a postgres:// broker namespace at dsn.
func Postgres(t testing.TB, dsn, schema string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Logf("cleanup: schema %s left behind: %v", schema, err)
		}
	})
}

// rabbitCtlMu serialises rabbitmqctl calls (each starts an Erlang VM).
var rabbitCtlMu sync.Mutex

// RabbitMQ deletes the queues of namespace ns on the test RabbitMQ.
func RabbitMQ(t testing.TB, ns string) {
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

// NATS deletes the JetStream streams of namespace ns at endpoint.
func NATS(t testing.TB, endpoint, ns string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		nc, err := natsgo.Connect(endpoint)
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

// Asynq removes the Redis keys of asynq namespace ns at addr.
func Asynq(t testing.TB, addr, ns string) {
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

// RedisStreams removes the Redis keys of redis-streams namespace ns (with
// the default prefix) at addr.
func RedisStreams(t testing.TB, addr, ns string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		if err := scanUnlink(ctx, c, "sy:{"+ns+"}:*"); err != nil {
			t.Logf("cleanup: %v; namespace %s left behind in Redis", err, ns)
		}
	})
}

// scanUnlink unlinks every key matching pattern.
func scanUnlink(ctx context.Context, c *redis.Client, pattern string) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			c.Unlink(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// SQS deletes the queues of namespace ns; rawURL is the sqs:// URL the
// test used (it has a query).
func SQS(t testing.TB, rawURL, ns string) {
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
