package postgres

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	_ "github.com/switchyard-dev/switchyard/adapters/embedded" // the router's other broker
	"github.com/switchyard-dev/switchyard/broker"
)

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestOpen_Unreachable: a server that is not there is a transient error at
// open, within the connect timeout, naming no password.
func TestOpen_Unreachable(t *testing.T) {
	t.Parallel()
	_, err := broker.Open(ctxFor(t, 30*time.Second), "postgres://u:Hunter2-secret@127.0.0.1:1/db?connect_timeout=2", nil)
	if err == nil || broker.ClassOf(err) != broker.Transient {
		t.Fatalf("open an unreachable server: %v, want a transient error", err)
	}
	if strings.Contains(err.Error(), "Hunter2-secret") {
		t.Fatalf("the error quotes the password: %v", err)
	}
}

// TestOpen_BadURL: malformed parameters are ErrInvalid before any
// connection.
func TestOpen_BadURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"postgres://h/db?schema=pg_catalog", "postgres://h/db?schema=Upper", "postgres://h/db?schema=a&namespace=b",
		"postgres://h/db?max_message_size=0", "postgres://h/db?max_message_size=67108865", "postgres://h/db?max_batch=10001",
		"postgres://h/db?search_path=x", "postgres://h/db?dedup_window=0s", "postgres://h/db?poll=0s", "postgres://h/db?typo=1",
		"postgres://h/db?namespace=bad%20ns", "postgres://h/db?default_max_attempts=1000001",
	} {
		if _, err := broker.Open(ctxFor(t, 10*time.Second), u, nil); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", u, err)
		}
	}
}

// TestOpen_CreateFalse: create=false refuses a schema that does not exist
// (and creates nothing); once created, it opens.
func TestOpen_CreateFalse(t *testing.T) {
	t.Parallel()
	dsn := sharedDSN(t)
	schema := freshSchema(t, dsn)
	_, err := broker.Open(ctxFor(t, 30*time.Second), withParams(dsn, "schema="+schema+"&create=false"), nil)
	if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "no such broker schema") {
		t.Fatalf("create=false on a missing schema: %v, want ErrInvalid naming it", err)
	}
	conn, err := pgx.Connect(ctxFor(t, 10*time.Second), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctxFor(t, 10*time.Second), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("create=false created the schema (%d, %v)", n, err)
	}
	openBroker(t, withParams(dsn, "schema="+schema), nil)
	openBroker(t, withParams(dsn, "schema="+schema+"&create=false"), nil)
}

// TestNamespace: namespace= names a schema of its own (SchemaFor), so two
// namespaces never see each other's lanes.
func TestNamespace(t *testing.T) {
	t.Parallel()
	dsn := sharedDSN(t)
	for _, ns := range []string{"tnsa", "tns.B"} {
		t.Cleanup(func() { dropSchema(dsn, SchemaFor(ns)) })
	}
	a := openBroker(t, withParams(dsn, "namespace=tnsa"), nil)
	b := openBroker(t, withParams(dsn, "namespace=tns.B"), nil)
	if got := driverOf(a).Schema(); got != "sy_tnsa" {
		t.Errorf("schema of namespace tnsa = %q", got)
	}
	if got := driverOf(b).Schema(); got == "sy_tns_b" || validSchema(got) != nil {
		t.Errorf("schema of namespace tns.B = %q: want a valid name with a hash suffix", got)
	}
	if _, err := a.PublishOne(ctxFor(t, 10*time.Second), &broker.Message{Lane: "batch", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if ds, err := b.Receive(ctxFor(t, 10*time.Second), broker.ReceiveRequest{Lane: "batch", Max: 10, Wait: 300 * time.Millisecond}); err != nil || len(ds) != 0 {
		t.Fatalf("another namespace received %d messages (%v)", len(ds), err)
	}
}

// TestNotify_WakesIdleReceive: with the fallback poll an hour long, a
// receive waiting on an empty lane still gets a message another Broker
// (its own pool and listener, as another process would have) publishes:
// only the LISTEN/NOTIFY wake-up can deliver it within the wait.
func TestNotify_WakesIdleReceive(t *testing.T) {
	t.Parallel()
	u := testURL(t, "poll=1h")
	consumer, producer := openBroker(t, u, nil), openBroker(t, u, nil)
	// The lane exists and is empty.
	if _, err := consumer.Receive(ctxFor(t, 10*time.Second), broker.ReceiveRequest{Lane: "interactive", Max: 1}); err != nil {
		t.Fatal(err)
	}
	got := make(chan []*broker.Delivery, 1)
	errc := make(chan error, 1)
	go func() {
		ds, err := consumer.Receive(ctxFor(t, 40*time.Second), broker.ReceiveRequest{Lane: "interactive", Max: 1, Lease: time.Minute, Wait: 30 * time.Second})
		errc <- err
		got <- ds
	}()
	time.Sleep(300 * time.Millisecond) // let it wait (it would find the message anyway if it came first)
	rs, err := producer.PublishOne(ctxFor(t, 10*time.Second), &broker.Message{Lane: "interactive", Kind: "chat.reply"})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	ds := <-got
	if len(ds) != 1 || ds[0].ID != rs.ID {
		t.Fatalf("the waiting receive got %d messages: the notification did not wake it", len(ds))
	}
}

// TestInjectedRows: rows written behind the driver's back — headers that
// are not JSON, a bad ID, a bad kind, a tenant with a control character,
// an attempt limit out of range, an attempt count at the top of its type —
// are dead-lettered with a reason when received, never delivered or
// looped, and the message behind them flows.
func TestInjectedRows(t *testing.T) {
	t.Parallel()
	u := testURL(t, "")
	b := openBroker(t, u, nil)
	d := driverOf(b)
	ctx := ctxFor(t, 60*time.Second)
	// Create the schema's lane first, as a running system has it.
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "warm.up"}); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Wait: 5 * time.Second})
	if err != nil || len(ds) != 1 {
		t.Fatalf("warm-up: %v %d", err, len(ds))
	}
	if err := b.Ack(ctx, ds...); err != nil {
		t.Fatal(err)
	}
	dsn := strings.SplitN(d.cfg.DSN, "?", 2)[0]
	type bad struct {
		name            string
		id, kind        string
		headers         []byte
		maxAtt, attempt int32
		reason          broker.Reason
	}
	bads := []bad{
		{"headers not JSON", broker.NewID(), "k", []byte("\x00\xff{"), 0, 0, broker.ReasonUndecodable},
		{"headers not strings", broker.NewID(), "k", []byte(`{"a":1}`), 0, 0, broker.ReasonUndecodable},
		{"empty ID", "", "k", nil, 0, 0, broker.ReasonUndecodable},
		{"ID with a newline", "a\nb", "k", nil, 0, 0, broker.ReasonUndecodable},
		{"bad kind", broker.NewID(), "no spaces", nil, 0, 0, broker.ReasonUndecodable},
		{"max attempts out of range", broker.NewID(), "k", nil, 2_000_000, 0, broker.ReasonUndecodable},
		{"negative max attempts", broker.NewID(), "k", nil, -3, 0, broker.ReasonUndecodable},
		{"attempts at the top of int32", broker.NewID(), "k", nil, 0, 2147483647, broker.ReasonMaxAttempts},
	}
	for _, x := range bads {
		if err := insertRaw(ctx, d.cfg.DSN, d.cfg.Schema, "batch", x.id, x.kind, x.headers, []byte("x"), x.maxAtt, x.attempt); err != nil {
			t.Fatalf("%s: inject: %v (%s)", x.name, err, dsn)
		}
	}
	good, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "doc.embed"})
	if err != nil {
		t.Fatal(err)
	}
	var live []*broker.Delivery
	for i := 0; i < 20 && len(live) == 0; i++ {
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 20, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, ds...)
	}
	if len(live) != 1 || live[0].ID != good.ID {
		t.Fatalf("received %d messages, want only the valid one", len(live))
	}
	if err := b.Ack(ctx, live...); err != nil {
		t.Fatal(err)
	}
	dead, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 20, DeadLetters: true, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != len(bads) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(bads))
	}
	reasons := map[broker.Reason]int{}
	for _, dv := range dead {
		if dv.DeadLetter == nil || dv.DeadLetter.Error == "" {
			t.Errorf("dead letter %q without a reason and error: %+v", dv.ID, dv.DeadLetter)
			continue
		}
		reasons[dv.DeadLetter.Reason]++
	}
	if reasons[broker.ReasonUndecodable] != len(bads)-1 || reasons[broker.ReasonMaxAttempts] != 1 {
		t.Errorf("reasons %v, want %d undecodable and 1 max_attempts", reasons, len(bads)-1)
	}
	if err := b.Ack(ctx, dead...); err != nil {
		t.Fatal(err)
	}
	s, err := b.Stats(ctx, "batch")
	if err != nil || s.Ready+s.InFlight+s.Delayed+s.DeadLettered != 0 {
		t.Fatalf("lane not empty: %+v %v", s, err)
	}
}

// TestPublishTx: messages published in a caller's transaction exist if
// and only if it commits; an invalid or oversized one fails the call with
// a typed error.
func TestPublishTx(t *testing.T) {
	t.Parallel()
	u := testURL(t, "max_message_size=4096")
	b := openBroker(t, u, nil)
	d := driverOf(b)
	ctx := ctxFor(t, 60*time.Second)
	msg := func(body string) *broker.Message {
		return &broker.Message{ID: broker.NewID(), Lane: "batch", Kind: "order.placed", Body: []byte(body), EnqueuedAt: time.Now(), IdempotencyKey: "k-" + body}
	}
	// Rolled back: nothing.
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.PublishTx(ctx, tx, []*broker.Message{msg("rolled-back")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Committed, with a duplicate key in the same transaction.
	kept := msg("kept")
	err = pgx.BeginFunc(ctx, d.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil { // the caller's own write would go here
			return err
		}
		rs, err := d.PublishTx(ctx, tx, []*broker.Message{kept, msg("kept")})
		if err != nil {
			return err
		}
		if rs[0].Duplicate || !rs[1].Duplicate || rs[1].ID != kept.ID {
			t.Errorf("results %+v: want the second a duplicate of %s", rs, kept.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Refused before writing.
	tx, err = d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	big := msg("big")
	big.Body = make([]byte, 5000)
	if _, err := d.PublishTx(ctx, tx, []*broker.Message{big}); !errors.Is(err, broker.ErrTooLarge) {
		t.Errorf("oversized: %v, want ErrTooLarge", err)
	}
	if _, err := d.PublishTx(ctx, tx, []*broker.Message{{Lane: "bad lane", Kind: "k"}}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("invalid: %v, want ErrInvalid", err)
	}
	if _, err := d.PublishTx(ctx, nil, []*broker.Message{msg("x")}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("nil tx: %v, want ErrInvalid", err)
	}
	var ids []string
	for i := 0; i < 5 && len(ids) < 2; i++ {
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, dv := range ds {
			ids = append(ids, string(dv.Body))
		}
		if err := b.Ack(ctx, ds...); err != nil {
			t.Fatal(err)
		}
	}
	if len(ids) != 1 || ids[0] != "kept" {
		t.Fatalf("received %v, want only the committed message", ids)
	}
}

// TestRouter: router:// opens this driver for a lane by its nested URL
// (the interactive lane on PostgreSQL, the rest on the embedded broker).
func TestRouter(t *testing.T) {
	t.Parallel()
	pg := testURL(t, "")
	emb := "embedded://" + t.TempDir() + "/q.db"
	b := openBroker(t, "router://?default="+url.QueryEscape(emb)+"&lane.interactive="+url.QueryEscape(pg), nil)
	ctx := ctxFor(t, 30*time.Second)
	for _, lane := range []string{"interactive", "batch"} {
		if _, err := b.PublishOne(ctx, &broker.Message{Lane: lane, Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	direct := openBroker(t, pg, nil)
	if s, err := direct.Stats(ctx, "interactive"); err != nil || s.Ready != 1 {
		t.Fatalf("the interactive lane on PostgreSQL: %+v %v", s, err)
	}
	if s, err := direct.Stats(ctx, "batch"); err != nil || s.Ready != 0 {
		t.Fatalf("the batch lane reached PostgreSQL: %+v %v", s, err)
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "interactive", Max: 1, Wait: 5 * time.Second})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive through the router: %d %v", len(ds), err)
	}
	if err := b.Ack(ctx, ds...); err != nil {
		t.Fatal(err)
	}
}
