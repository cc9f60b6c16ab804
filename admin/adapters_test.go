package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

	_ "github.com/switchyard-dev/switchyard/adapters/all"
	"github.com/switchyard-dev/switchyard/adapters/sqs"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestMain gives the AWS SDK dummy credentials when none are set (the SQS
// emulator checks none).
func TestMain(m *testing.M) {
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		os.Setenv("AWS_ACCESS_KEY_ID", "test")
		os.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	}
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// TestOps_DeadLettersEveryAdapter runs the dead-letter operations (list,
// look up, replay, move, purge) on every real adapter, each in a namespace
// of its own that the test removes afterwards.
func TestOps_DeadLettersEveryAdapter(t *testing.T) {
	for _, kind := range []string{"embedded", "rabbitmq", "nats", "asynq", "sqs"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ns := adapterNamespace()
			e := newEnvURL(t, adapterURL(t, kind, ns), true, []string{"batch"})
			var want []string
			for i, tenant := range []string{"acme", "acme", "globex", "acme"} {
				r, err := e.ops.Enqueue(e.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", Lane: "batch", Tenant: tenant,
					Args: json.RawMessage(`{"i":` + string(rune('0'+i)) + `}`), IdempotencyKey: "key-" + string(rune('a'+i))})
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, r.ID)
			}
			if got := e.killN("batch", broker.ReasonPermanent, 4); len(got) != 4 {
				t.Fatalf("dead-lettered %d of 4", len(got))
			}
			list := func(sc Scope, f DeadFilter) []string {
				t.Helper()
				items, err := e.ops.DeadLetters(e.ctx, sc, f)
				if err != nil {
					t.Fatal(err)
				}
				return ids(items)
			}
			for round := 0; round < 3; round++ {
				if got := list(Scope{}, DeadFilter{Lane: "batch"}); !slices.Equal(got, sorted(want)) {
					t.Fatalf("round %d: listed %v, want %v", round, got, sorted(want))
				}
			}
			if got := list(Scope{}, DeadFilter{}); !slices.Equal(got, sorted(want)) {
				t.Fatalf("every lane: listed %v, want %v", got, sorted(want))
			}
			if got := list(Scope{Tenant: "globex"}, DeadFilter{}); !slices.Equal(got, []string{want[2]}) {
				t.Errorf("scoped: %v", got)
			}
			it, err := e.ops.DeadLetter(e.ctx, Scope{}, "batch", want[1])
			if err != nil || it.Reason != broker.ReasonPermanent || it.Tenant != "acme" || it.Kind != "pdf.parse" {
				t.Errorf("dead letter: %+v %v", it, err)
			}
			if _, err := e.ops.DeadLetter(e.ctx, Scope{Tenant: "acme"}, "batch", want[2]); err == nil {
				t.Error("another tenant's dead letter found")
			}

			rep, err := e.ops.Replay(e.ctx, Scope{}, DeadFilter{Lane: "batch", IDs: []string{want[0]}}, "operator:t", nil)
			if err != nil || rep.Done != 1 || len(rep.Failed) != 0 {
				t.Fatalf("replay: %+v %v", rep, err)
			}
			rep, err = e.ops.Move(e.ctx, Scope{Tenant: "acme"}, DeadFilter{Lane: "batch", IDs: []string{want[1]}}, "other", "operator:t", nil)
			if err != nil || rep.Done != 1 || len(rep.Failed) != 0 {
				t.Fatalf("move: %+v %v", rep, err)
			}
			rep, err = e.ops.Purge(e.ctx, Scope{}, DeadFilter{Lane: "batch", Tenant: "globex"}, "operator:t", nil)
			if err != nil || rep.Done != 1 {
				t.Fatalf("purge: %+v %v", rep, err)
			}
			if got := list(Scope{}, DeadFilter{Lane: "batch"}); !slices.Equal(got, []string{want[3]}) {
				t.Errorf("left: %v, want %v", got, want[3:])
			}
			for id, st := range map[string]ledger.State{want[0]: ledger.Queued, want[1]: ledger.Queued, want[2]: ledger.Dead, want[3]: ledger.Dead} {
				if got := e.state(id); got != st {
					t.Errorf("%s: %s, want %s", id, got, st)
				}
			}
			// Peeking at the live lane takes nothing and spends no attempt.
			ms, err := e.ops.Peek(e.ctx, Scope{}, "batch", 5)
			if err != nil || len(ms) != 1 || ms[0].ID != want[0] {
				t.Errorf("peek: %d %v", len(ms), err)
			}
			if d := e.receiveOne("batch"); d.ID != want[0] || d.Attempt != 1 {
				t.Errorf("replayed: %s attempt %d", d.ID, d.Attempt)
			}
			if d := e.receiveOne("other"); d.ID != want[1] || d.Tenant != "acme" || d.IdempotencyKey != "key-b" || string(d.Body) != `{"i":1}` {
				t.Errorf("moved: %+v", d.Message)
			}
		})
	}
}

// killN dead-letters n messages of lane, waiting up to 30s for them.
func (e *env) killN(lane string, reason broker.Reason, n int) []string {
	e.t.Helper()
	var out []string
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		ds, err := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: lane, Max: n - len(out), Lease: time.Minute, Wait: time.Second})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, d := range ds {
			e.transition(d.ID, ledger.Running, "attempt_started")
			e.transition(d.ID, ledger.Dead, string(reason))
			if err := e.b.DeadLetter(e.ctx, d, &broker.DeadLetter{Reason: reason, Error: "boom"}); err != nil {
				e.t.Fatal(err)
			}
			out = append(out, d.ID)
		}
	}
	return out
}

// receiveOne receives one message of lane, waiting up to 30s, and acks it.
func (e *env) receiveOne(lane string) *broker.Delivery {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: lane, Max: 1, Lease: time.Minute, Wait: time.Second})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(ds) == 1 {
			_ = e.b.Ack(e.ctx, ds[0])
			return ds[0]
		}
	}
	e.t.Fatalf("nothing arrived on %s", lane)
	return nil
}

func adapterNamespace() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "adm" + hex.EncodeToString(b[:])
}

// adapterURL returns a URL of the named adapter for namespace ns, and
// registers the removal of what the test creates there; it skips when the
// broker is unavailable.
func adapterURL(t *testing.T, kind, ns string) string {
	t.Helper()
	switch kind {
	case "embedded":
		return "embedded://" + filepath.Join(t.TempDir(), "q.db") + "?namespace=" + ns
	case "rabbitmq":
		u, err := url.Parse(testenv.RabbitMQ.Endpoint(t))
		if err != nil {
			t.Fatal("RabbitMQ endpoint does not parse")
		}
		if u.Scheme == "amqp" {
			u.Scheme = "rabbitmq"
		}
		u.RawQuery = "namespace=" + ns
		t.Cleanup(func() { cleanupRabbitMQ(t, ns) })
		return u.String()
	case "nats":
		endpoint := testenv.NATS.Endpoint(t)
		t.Cleanup(func() { cleanupNATS(t, endpoint, ns) })
		return strings.TrimSuffix(endpoint, "/") + "/?namespace=" + ns
	case "asynq":
		addr := testenv.Redis.Endpoint(t)
		t.Cleanup(func() { cleanupRedis(addr, ns) })
		return "redis://" + addr + "/0?namespace=" + ns
	case "sqs":
		endpoint := testenv.SQS.Endpoint(t)
		u := "sqs://?region=us-east-1&endpoint=" + url.QueryEscape(endpoint) + "&namespace=" + ns
		t.Cleanup(func() { cleanupSQS(u, ns) })
		return u
	}
	t.Fatalf("unknown adapter %q", kind)
	return ""
}

var rabbitCtlMu sync.Mutex

func cleanupRabbitMQ(t *testing.T, ns string) {
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
		if !strings.HasPrefix(name, "switchyard."+ns+".") {
			continue
		}
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		_, _ = ch.QueueDelete(name, false, false, false)
		_ = ch.Close()
	}
}

func cleanupNATS(t *testing.T, endpoint, ns string) {
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
	var doomed []string
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		if strings.Contains(strings.ToLower(n), ns) {
			doomed = append(doomed, n)
		}
	}
	for _, n := range doomed {
		_ = js.DeleteStream(ctx, n)
	}
}

func cleanupRedis(addr, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var cursor uint64
	for i := 0; i < 1000; i++ {
		keys, next, err := c.Scan(ctx, cursor, "asynq:{"+ns+":*", 500).Result()
		if err != nil {
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
}

func cleanupSQS(rawURL, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := url.Parse(rawURL + "&create=false")
	if err != nil {
		return
	}
	d, err := sqs.Open(ctx, u)
	if err != nil {
		return
	}
	defer d.Close()
	out, err := d.Client().ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(ns + "_"), MaxResults: aws.Int32(1000)})
	if err != nil {
		return
	}
	for _, q := range out.QueueUrls {
		_, _ = d.Client().DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(q)})
	}
}
