package runtimebench

import (
	"context"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/adapters/gcppubsub"
	pgbroker "github.com/switchyard-dev/switchyard/adapters/postgres"
	"github.com/switchyard-dev/switchyard/adapters/rabbitmq"
	"github.com/switchyard-dev/switchyard/adapters/sqs"
	"github.com/switchyard-dev/switchyard/broker"
)

// benchLanes are the lanes a run can create queues for: the adapter
// loop's and the Server's defaults.
var benchLanes = []string{"rawbench", "interactive", "scheduled", "batch", "human-review"}

// CleanNamespace removes, best effort, what a run created in namespace ns
// of the broker at rawURL (which carries ns): RabbitMQ queues, NATS
// streams, asynq keys, SQS queues, the postgres:// broker's schema, Pub/Sub
// topics and subscriptions. Failures are logged, not returned.
func CleanNamespace(rawURL, ns string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u, err := url.Parse(rawURL)
	if err != nil {
		return
	}
	var cerr error
	switch strings.ToLower(u.Scheme) {
	case "rabbitmq", "amqp", "amqps":
		cerr = cleanRabbitMQ(u, ns)
	case "nats":
		cerr = cleanNATS(ctx, u, ns)
	case "redis", "rediss", "asynq":
		cerr = cleanAsynq(ctx, u, ns)
	case "redis-streams":
		cerr = cleanRedisStreams(ctx, u, ns)
	case "sqs":
		cerr = cleanSQS(ctx, u, ns)
	case "postgres", "postgresql":
		cerr = cleanPostgresBroker(ctx, u, ns)
	case "gcppubsub":
		cerr = cleanPubSub(ctx, u)
	}
	if cerr != nil {
		log.Warn("runtimebench: cleanup failed; the namespace is left behind", "broker", broker.Redact(u), "namespace", ns, "error", cerr)
	}
}

// cleanPostgresBroker drops the schema of the postgres:// broker's
// namespace.
func cleanPostgresBroker(ctx context.Context, u *url.URL, ns string) error {
	a := *u
	a.Scheme = "postgres"
	q := a.Query()
	for _, p := range []string{"namespace", "schema", "dedup_window", "max_message_size", "max_batch", "default_max_attempts", "poll", "create"} {
		q.Del(p)
	}
	a.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, a.String())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{pgbroker.SchemaFor(ns)}.Sanitize()+` CASCADE`)
	return err
}

func cleanRabbitMQ(u *url.URL, ns string) error {
	a := *u
	a.RawQuery = ""
	switch a.Scheme {
	case "rabbitmq":
		a.Scheme = "amqp"
	}
	conn, err := amqp.Dial(a.String())
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, lane := range benchLanes {
		prefix := "switchyard." + ns + "." + lane
		qs := []string{prefix, prefix + ".dlq"}
		// The delay queues (run-at tasks, retries with backoff): one per
		// bucket, 100 ms doubling to past the adapter's MaxDelay (named
		// as the adapter's config.delayQueue does).
		for b := 100 * time.Millisecond; ; b *= 2 {
			qs = append(qs, prefix+".delay."+strconv.FormatInt(b.Milliseconds(), 10)+"ms")
			if b >= rabbitmq.MaxDelay {
				break
			}
		}
		for _, q := range qs {
			ch, err := conn.Channel()
			if err != nil {
				return err
			}
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	}
	return nil
}

func cleanNATS(ctx context.Context, u *url.URL, ns string) error {
	a := *u
	a.RawQuery, a.Path = "", ""
	nc, err := natsgo.Connect(a.String())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	names := js.StreamNames(ctx)
	var doomed []string
	for n := range names.Name() {
		if strings.Contains(strings.ToLower(n), strings.ToLower(ns)) {
			doomed = append(doomed, n)
		}
	}
	for _, n := range doomed {
		if err := js.DeleteStream(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func cleanAsynq(ctx context.Context, u *url.URL, ns string) error {
	opt := &redis.Options{Addr: u.Host}
	if p, ok := u.User.Password(); ok {
		opt.Password = p
	}
	c := redis.NewClient(opt)
	defer c.Close()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, "asynq:{"+ns+":*", 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			c.Unlink(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	members, err := c.SMembers(ctx, "asynq:queues").Result()
	if err != nil {
		return err
	}
	for _, m := range members {
		if strings.HasPrefix(m, ns+":") {
			c.SRem(ctx, "asynq:queues", m)
		}
	}
	return nil
}

// cleanRedisStreams unlinks the keys of a redis-streams namespace (the
// URL's prefix, default "sy").
func cleanRedisStreams(ctx context.Context, u *url.URL, ns string) error {
	opt := &redis.Options{Addr: u.Host}
	if p, ok := u.User.Password(); ok {
		opt.Password = p
	}
	if db, err := strconv.Atoi(strings.Trim(u.Path, "/")); err == nil {
		opt.DB = db
	}
	prefix := u.Query().Get("prefix")
	if prefix == "" {
		prefix = "sy"
	}
	c := redis.NewClient(opt)
	defer c.Close()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+":{"+ns+"}:*", 1000).Result()
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

func cleanSQS(ctx context.Context, u *url.URL, ns string) error {
	a := *u
	q := a.Query()
	q.Set("create", "false")
	a.RawQuery = q.Encode()
	d, err := sqs.Open(ctx, &a)
	if err != nil {
		return err
	}
	defer d.Close()
	out, err := d.Client().ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(ns + "_"), MaxResults: aws.Int32(1000)})
	if err != nil {
		return err
	}
	for _, qu := range out.QueueUrls {
		_, _ = d.Client().DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(qu)})
	}
	return nil
}

// cleanPubSub deletes the bench lanes' topics and subscriptions.
func cleanPubSub(ctx context.Context, u *url.URL) error {
	a := *u
	q := a.Query()
	q.Set("create", "false")
	a.RawQuery = q.Encode()
	d, err := gcppubsub.Open(ctx, &a)
	if err != nil {
		return err
	}
	defer d.Close()
	var first error
	for _, lane := range benchLanes {
		if err := d.DeleteLane(ctx, lane); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// dropSchema drops the ledger schema ns of dsn's database.
func dropSchema(dsn, ns string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgxDSN(dsn))
	if err == nil {
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{ns}.Sanitize()+" CASCADE")
	}
	if err != nil {
		log.Warn("runtimebench: dropping the ledger schema failed", "schema", ns, "error", err)
	}
}
