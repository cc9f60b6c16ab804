package integration_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/asynq"
	_ "github.com/switchyard-dev/switchyard/adapters/rabbitmq"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/codec"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/internal/testclean"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// secretMarker must appear in no broker or ledger storage when encryption
// is on: it is in the arguments, a step output, an effect result and the
// task's result.
const secretMarker = "SWITCHYARD-SECRET-MARKER-3b9d1e"

type secretArgs struct {
	Secret string `json:"secret"`
	Fail   bool   `json:"fail"`
}

func (secretArgs) Kind() string { return "test.secret" }

func secretCodec(t testing.TB, keys string) broker.Codec {
	t.Helper()
	r, err := codec.ParseKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	a, err := codec.New(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func secretKey(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }

// secretRun runs one task carrying the marker through Client and Server on
// b and L (b's codec seals L too) and checks the handler, the step and the
// effect saw plaintext and the ledger gives plaintext back. With fail, the
// handler fails permanently after its step and effect (a dead letter).
type secretRun struct {
	t   *testing.T
	b   *broker.Broker
	L   ledger.Ledger
	c   *switchyard.Client
	srv *switchyard.Server
	saw atomic.Int32
}

func newSecretRun(t *testing.T, b *broker.Broker, L ledger.Ledger) *secretRun {
	t.Helper()
	r := &secretRun{t: t, b: b, L: L}
	var err error
	if r.c, err = switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L}); err != nil {
		t.Fatal(err)
	}
	r.srv, err = switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, Slots: 4, Lease: 5 * time.Second, PollWait: 100 * time.Millisecond,
		Retry: scheduler.RetryPolicy{Base: 20 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 2}})
	if err != nil {
		t.Fatal(err)
	}
	err = switchyard.Register(r.srv, func(ctx context.Context, tk *switchyard.Task[secretArgs]) error {
		if tk.Args.Secret != secretMarker {
			return switchyard.Permanent(errors.New("the handler did not get the plaintext arguments"))
		}
		s, err := switchyard.Step(ctx, "s", func(context.Context) (string, error) { return secretMarker + "-step", nil })
		if err != nil || s != secretMarker+"-step" {
			return switchyard.Permanent(errors.New("step output did not round-trip"))
		}
		e, err := switchyard.Effect(ctx, "e", func(context.Context) (string, error) { return secretMarker + "-effect", nil }, nil)
		if err != nil || e != secretMarker+"-effect" {
			return switchyard.Permanent(errors.New("effect result did not round-trip"))
		}
		r.saw.Add(1)
		if tk.Args.Fail {
			return switchyard.Permanent(errors.New("failing on purpose"))
		}
		return tk.SetResult(secretMarker + "-result")
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *secretRun) enqueue(fail bool) string {
	r.t.Helper()
	res, err := r.c.Enqueue(context.Background(), secretArgs{Secret: secretMarker, Fail: fail}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		r.t.Fatal(err)
	}
	return res.ID
}

func (r *secretRun) start() {
	r.t.Helper()
	if err := r.srv.Start(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.srv.Stop(ctx)
	})
}

// wait waits for the task to reach state and checks what the ledger gives
// back is the plaintext.
func (r *secretRun) wait(id string, state ledger.State) {
	r.t.Helper()
	var info *switchyard.TaskInfo
	waitFor(r.t, 20*time.Second, func() bool {
		var err error
		info, err = r.c.Task(context.Background(), id)
		return err == nil && info.Task.State == state
	})
	if !strings.Contains(string(info.Task.Args), secretMarker) {
		r.t.Errorf("ledger args read back: %q", info.Task.Args)
	}
	if state == ledger.Completed && string(info.Task.Result) != `"`+secretMarker+`-result"` {
		r.t.Errorf("ledger result read back: %q", info.Task.Result)
	}
	if len(info.Effects) != 1 || string(info.Effects[0].Result) != `"`+secretMarker+`-effect"` {
		r.t.Errorf("ledger effects read back: %+v", info.Effects)
	}
}

// absent fails when raw holds the marker, plainly or hex-encoded.
func absent(t *testing.T, what string, raw []byte) {
	t.Helper()
	for _, m := range []string{secretMarker, hex.EncodeToString([]byte(secretMarker)), base64.StdEncoding.EncodeToString([]byte(secretMarker))[:20]} {
		if bytes.Contains(raw, []byte(m)) {
			t.Errorf("%s holds the plaintext marker (as %.12s…)", what, m)
		}
	}
}

func rawFiles(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		for _, f := range []string{p, p + "-wal", p + "-shm"} {
			b, err := os.ReadFile(f)
			if errors.Is(err, os.ErrNotExist) && f != p {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			absent(t, filepath.Base(f), b)
		}
	}
}

// TestEncryption_EmbeddedSQLite: with encryption on, a task's arguments,
// step output, effect result and result reach the handler and come back
// from the ledger as plaintext, while neither the embedded broker's files
// nor the SQLite ledger's (database, -wal, -shm) ever hold them — checked
// while the task waits in the queue, after it completed, after another
// dead-lettered, and after both stores are closed.
func TestEncryption_EmbeddedSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	qPath, lPath := filepath.Join(dir, "q.db"), filepath.Join(dir, "ledger.db")
	L, err := sqlite.Open(ctx, lPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Open(ctx, "embedded://"+qPath, &broker.Options{Codec: secretCodec(t, "k1:"+secretKey(1)), Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	r := newSecretRun(t, b, L)
	ok, dead := r.enqueue(false), r.enqueue(true)
	rawFiles(t, qPath, lPath)
	r.start()
	r.wait(ok, ledger.Completed)
	r.wait(dead, ledger.Dead)
	if n := r.saw.Load(); n != 2 {
		t.Errorf("handler saw the plaintext %d times, want 2", n)
	}
	rawFiles(t, qPath, lPath)
	ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r.srv.Stop(ctx2)
	b.Close()
	L.Close()
	rawFiles(t, qPath, lPath)
}

// TestEncryption_WrongKey: a server with another key dead-letters the
// task as undecodable, once: the handler never runs, nothing loops, and
// the dead letter holds the sealed body, so a replay by a server with the
// right key runs it.
func TestEncryption_WrongKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	open := func(keys string) *broker.Broker {
		b, err := broker.Open(ctx, "embedded://"+path, &broker.Options{Codec: secretCodec(t, keys)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	good, wrong := open("k1:"+secretKey(1)), open("k2:"+secretKey(2))
	c, _ := switchyard.NewClient(good, nil)
	res, err := c.Enqueue(ctx, secretArgs{Secret: secretMarker}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	r := newSecretRun(t, wrong, nil)
	r.start()
	var d *broker.Delivery
	waitFor(t, 10*time.Second, func() bool {
		ds, err := good.Receive(ctx, broker.ReceiveRequest{Lane: "interactive", Max: 1, Lease: time.Minute, DeadLetters: true})
		if err != nil || len(ds) == 0 {
			return false
		}
		d = ds[0]
		return true
	})
	if d.ID != res.ID || d.DeadLetter.Reason != broker.ReasonUndecodable || !strings.Contains(d.DeadLetter.Error, "unknown key") {
		t.Fatalf("dead letter %s: %+v", d.ID, d.DeadLetter)
	}
	if string(d.Body) != `{"secret":"`+secretMarker+`","fail":false}` {
		t.Fatalf("the right key does not open the dead letter: %q", d.Body)
	}
	if r.saw.Load() != 0 {
		t.Fatal("the handler ran with the wrong key")
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.srv.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if err := good.Replay(ctx, d); err != nil {
		t.Fatal(err)
	}
	ok := newSecretRun(t, good, nil)
	ok.start()
	waitFor(t, 10*time.Second, func() bool { return ok.saw.Load() == 1 })
}

// TestEncryption_PostgresLedger: the PostgreSQL ledger's rows (every
// table, every column, bytea included) never hold the marker.
func TestEncryption_PostgresLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.LedgerDSN(t)
	L, err := ledger.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()
	b, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), &broker.Options{Codec: secretCodec(t, "k1:"+secretKey(1)), Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := newSecretRun(t, b, L)
	ok, dead := r.enqueue(false), r.enqueue(true)
	r.start()
	r.wait(ok, ledger.Completed)
	r.wait(dead, ledger.Dead)

	u, _ := url.Parse(dsn)
	schema := u.Query().Get("schema")
	conn, err := pgx.Connect(ctx, testenv.Postgres.Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = $1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) < 5 {
		t.Fatalf("tables of %s: %v, %v", schema, tables, err)
	}
	seen := 0
	for _, tb := range tables {
		var dump *string
		q := `SELECT string_agg(t::text, E'\n') FROM ` + pgx.Identifier{schema, tb}.Sanitize() + ` t`
		if err := conn.QueryRow(ctx, q).Scan(&dump); err != nil {
			t.Fatal(err)
		}
		if dump != nil {
			seen++
			absent(t, "table "+tb, []byte(*dump))
			if tb == "ledger_tasks" && !strings.Contains(*dump, ok) {
				t.Fatalf("the dump of ledger_tasks lacks task %s", ok)
			}
		}
	}
	if seen < 4 {
		t.Fatalf("only %d tables had rows", seen)
	}
}

// TestEncryption_AsynqRaw: on Redis (asynq) the stored messages — queued,
// and dead-lettered (archived) — never hold the marker, read with a plain
// Redis client.
func TestEncryption_AsynqRaw(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := conformance.Namespace(t)
	rawURL := testclean.URL(t, "asynq", ns, nil)
	b, err := broker.Open(ctx, rawURL, &broker.Options{Codec: secretCodec(t, "k1:"+secretKey(1))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	L, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()
	r := newSecretRun(t, b, L)
	ok, dead := r.enqueue(false), r.enqueue(true)

	rc := redis.NewClient(&redis.Options{Addr: testenv.Redis.Endpoint(t)})
	defer rc.Close()
	dumpRedis := func() []byte {
		var all bytes.Buffer
		var cursor uint64
		for {
			keys, next, err := rc.Scan(ctx, cursor, "asynq:{"+ns+":*", 1000).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				all.WriteString(k + "\n")
				switch rc.Type(ctx, k).Val() {
				case "string":
					all.WriteString(rc.Get(ctx, k).Val())
				case "hash":
					for f, v := range rc.HGetAll(ctx, k).Val() {
						all.WriteString(f + "=" + v + "\n")
					}
				case "list":
					all.WriteString(strings.Join(rc.LRange(ctx, k, 0, -1).Val(), "\n"))
				case "zset":
					all.WriteString(strings.Join(rc.ZRange(ctx, k, 0, -1).Val(), "\n"))
				case "set":
					all.WriteString(strings.Join(rc.SMembers(ctx, k).Val(), "\n"))
				}
			}
			if cursor = next; cursor == 0 {
				return all.Bytes()
			}
		}
	}
	raw := dumpRedis()
	if !bytes.Contains(raw, []byte(ok)) || !bytes.Contains(raw, []byte(dead)) {
		t.Fatalf("the Redis dump (%d bytes) does not show the queued tasks: wrong keys?", len(raw))
	}
	absent(t, "Redis (queued)", raw)
	r.start()
	r.wait(ok, ledger.Completed)
	r.wait(dead, ledger.Dead)
	raw = dumpRedis()
	if !bytes.Contains(raw, []byte(dead)) {
		t.Fatalf("the Redis dump does not show the dead letter %s", dead)
	}
	absent(t, "Redis (after the run, dead letter included)", raw)
}

type stepArgs struct{}

func (stepArgs) Kind() string { return "test.step-secret" }

// TestEncryption_StepDoesNotOpen: a stored step output that does not open
// (sealed under a key this process lacks) dead-letters the task as
// undecodable, in the broker and the ledger, without calling the step
// again and without retrying.
func TestEncryption_StepDoesNotOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	S, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer S.Close()
	b, err := broker.Open(ctx, "embedded://"+filepath.Join(dir, "q.db"), &broker.Options{Codec: secretCodec(t, "k1:"+secretKey(1)), Dedup: S})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, _ := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: S})
	res, err := c.Enqueue(ctx, stepArgs{}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	other := ledger.WithCodec(S, secretCodec(t, "k2:"+secretKey(2)))
	if _, err := other.PutStep(ctx, res.ID, "s", []byte(`"x"`)); err != nil {
		t.Fatal(err)
	}
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: S, Slots: 4, PollWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var calls, stepCalls atomic.Int32
	switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[stepArgs]) error {
		calls.Add(1)
		_, err := switchyard.Step(ctx, "s", func(context.Context) (string, error) { stepCalls.Add(1); return "y", nil })
		return err
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	waitFor(t, 10*time.Second, func() bool {
		info, err := c.Task(ctx, res.ID)
		return err == nil && info.Task.State == ledger.Dead
	})
	evs, _ := S.Events(ctx, res.ID)
	var last ledger.Event
	for _, e := range evs {
		if e.To == ledger.Dead {
			last = e
		}
	}
	if last.Reason != string(broker.ReasonUndecodable) {
		t.Errorf("the move to dead %+v, want reason undecodable (events %+v)", last, evs)
	}
	if calls.Load() != 1 || stepCalls.Load() != 0 {
		t.Errorf("handler called %d times, step function %d; want 1 and 0", calls.Load(), stepCalls.Load())
	}
}

// TestEncryption_RabbitMQRaw: RabbitMQ's live queue and dead-letter queue,
// read with a plain AMQP client, hold the sealed body, never the marker.
func TestEncryption_RabbitMQRaw(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := conformance.Namespace(t)
	b, err := broker.Open(ctx, testclean.URL(t, "rabbitmq", ns, nil), &broker.Options{Codec: secretCodec(t, "k1:"+secretKey(1))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, _ := switchyard.NewClient(b, nil)
	res, err := c.Enqueue(ctx, secretArgs{Secret: secretMarker}, &switchyard.EnqueueOpts{Lane: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(testenv.RabbitMQ.Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	rawGet := func(queue string) {
		t.Helper()
		var m amqp.Delivery
		waitFor(t, 10*time.Second, func() bool {
			var ok bool
			m, ok, err = ch.Get(queue, false)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		})
		defer m.Nack(false, true)
		all := append(append([]byte(nil), m.Body...), []byte(m.MessageId+m.Type)...)
		for k, v := range m.Headers {
			all = append(all, []byte(k+"="+fmt.Sprint(v))...)
		}
		if !bytes.Contains(all, []byte(res.ID)) && !bytes.Contains(all, []byte("test.secret")) {
			t.Fatalf("the raw message in %s is not the task's", queue)
		}
		absent(t, "RabbitMQ queue "+queue, all)
	}
	rawGet("switchyard." + ns + ".batch")
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: 10 * time.Second, Wait: 5 * time.Second})
	if err != nil || len(ds) != 1 || !strings.Contains(string(ds[0].Body), secretMarker) {
		t.Fatalf("Receive = %v, %v", ds, err)
	}
	if err := b.DeadLetter(ctx, ds[0], &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "test"}); err != nil {
		t.Fatal(err)
	}
	rawGet("switchyard." + ns + ".batch.dlq")
}
