package nats

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustPublish(t testing.TB, b *broker.Broker, msgs ...*broker.Message) []broker.PublishResult {
	t.Helper()
	rs, err := b.Publish(ctxT(t, 30*time.Second), msgs...)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("publish %d: %v", i, r.Err)
		}
	}
	return rs
}

func receive(t testing.TB, b *broker.Broker, req broker.ReceiveRequest) []*broker.Delivery {
	t.Helper()
	ds, err := b.Receive(ctxT(t, req.Wait+30*time.Second), req)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return ds
}

func liveCount(t testing.TB, d *Driver) uint64 {
	t.Helper()
	si, err := d.liveStream.Info(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return si.State.Msgs
}

// TestMaxDeliver_PoisonToDeadLetters: a message that reached the consumer's
// max_deliver (its consumers crashed or hung every time) is moved by the
// MAX_DELIVERIES advisory to the dead-letter stream and deleted from the
// live stream, where JetStream would otherwise keep it for good.
func TestMaxDeliver_PoisonToDeadLetters(t *testing.T) {
	t.Parallel()
	// DefaultMaxAttempts above max_deliver, so that the server's limit, not
	// Broker's check, catches the message.
	b := openBroker(t, testURL(t, sharedEndpoint(t), "ack_wait=500ms&max_deliver=2"), &broker.Options{DefaultMaxAttempts: 10})
	d := driverOf(b)
	rs := mustPublish(t, b, &broker.Message{Lane: "batch", Kind: "poison", Body: []byte("crashes everyone")})
	for attempt := 1; attempt <= 2; attempt++ {
		ds := receive(t, b, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: 500 * time.Millisecond, Wait: 5 * time.Second})
		if len(ds) != 1 || ds[0].Attempt != attempt {
			t.Fatalf("delivery %d: got %d deliveries", attempt, len(ds))
		}
		time.Sleep(time.Until(ds[0].LeaseDeadline)) // abandoned, as by a crashed consumer
	}
	// The server notices the limit (and sends the advisory) when it next
	// tries to deliver, that is when a consumer pulls: workers keep
	// pulling, and so does this loop. The live lane must stay empty.
	deadline := time.Now().Add(15 * time.Second)
	var dead []*broker.Delivery
	for time.Now().Before(deadline) && len(dead) == 0 {
		if ds := receive(t, b, broker.ReceiveRequest{Lane: "batch", Max: 1, Wait: 500 * time.Millisecond}); len(ds) > 0 {
			t.Fatalf("delivered again past max_deliver (attempt %d)", ds[0].Attempt)
		}
		dead = receive(t, b, broker.ReceiveRequest{Lane: "batch", Max: 1, Wait: 500 * time.Millisecond, DeadLetters: true})
	}
	if len(dead) != 1 {
		t.Fatal("the message past max_deliver did not reach the dead-letter stream")
	}
	if dead[0].ID != rs[0].ID || dead[0].DeadLetter.Reason != broker.ReasonDeliveryLimit || string(dead[0].Body) != "crashes everyone" {
		t.Fatalf("dead letter %s reason %s body %q", dead[0].ID, dead[0].DeadLetter.Reason, dead[0].Body)
	}
	if !strings.Contains(dead[0].DeadLetter.Error, "max_deliver") {
		t.Errorf("dead-letter error %q does not say why", dead[0].DeadLetter.Error)
	}
	if n := liveCount(t, d); n != 0 {
		t.Fatalf("the live stream still holds %d messages", n)
	}
	// Replay makes it live again, with fresh attempts.
	if err := b.Replay(ctxT(t, 10*time.Second), dead[0]); err != nil {
		t.Fatal(err)
	}
	back := receive(t, b, broker.ReceiveRequest{Lane: "batch", Max: 1, Wait: 5 * time.Second})
	if len(back) != 1 || back[0].ID != rs[0].ID || back[0].Attempt != 1 {
		t.Fatalf("replayed: %d deliveries", len(back))
	}
	if err := b.Ack(ctxT(t, 10*time.Second), back...); err != nil {
		t.Fatal(err)
	}
}

// TestLease_LongerThanAckWait: a lease asked for beyond AckWait is kept
// alive with InProgress; the message is not redelivered before it ends and
// is soon after.
func TestLease_LongerThanAckWait(t *testing.T) {
	t.Parallel()
	rawURL := testURL(t, sharedEndpoint(t), "ack_wait=500ms")
	a := openBroker(t, rawURL, nil)
	b := openBroker(t, rawURL, nil)
	mustPublish(t, a, &broker.Message{Lane: "l", Kind: "k"})
	start := time.Now()
	ds := receive(t, a, broker.ReceiveRequest{Lane: "l", Max: 1, Lease: 2500 * time.Millisecond, Wait: 5 * time.Second})
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	if got := ds[0].LeaseDeadline.Sub(start); got < 2400*time.Millisecond || got > 3*time.Second {
		t.Fatalf("lease deadline %s after the request, want about 2.5s", got)
	}
	for time.Now().Before(ds[0].LeaseDeadline.Add(-100 * time.Millisecond)) {
		if got := receive(t, b, broker.ReceiveRequest{Lane: "l", Max: 1, Wait: 200 * time.Millisecond}); len(got) > 0 {
			t.Fatalf("redelivered %s after %s, inside the 2.5s lease", got[0].ID, time.Since(start))
		}
	}
	got := receive(t, b, broker.ReceiveRequest{Lane: "l", Max: 1, Wait: 3 * time.Second})
	if len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("not redelivered within 3s after the lease")
	}
	if err := a.Ack(ctxT(t, 5*time.Second), ds[0]); !errors.Is(err, broker.ErrLeaseLost) {
		t.Errorf("ack after the lease: %v, want ErrLeaseLost", err)
	}
	if err := b.Ack(ctxT(t, 5*time.Second), got[0]); err != nil {
		t.Fatal(err)
	}
}

// TestConsumer_Mismatch: NATS 2.9 silently updates a consumer on create;
// the driver reads the configuration back and refuses one that does not
// match its URL.
func TestConsumer_Mismatch(t *testing.T) {
	t.Parallel()
	ep := sharedEndpoint(t)
	ns := testNamespace(t)
	a := openBroker(t, ep+"/?namespace="+ns+"&ack_wait=1s", nil)
	receive(t, a, broker.ReceiveRequest{Lane: "l", Max: 1})
	b := openBroker(t, ep+"/?namespace="+ns+"&ack_wait=2s", nil)
	_, err := b.Receive(ctxT(t, 10*time.Second), broker.ReceiveRequest{Lane: "l", Max: 1})
	if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "ack wait is 1s") {
		t.Fatalf("receive with another ack_wait: %v, want ErrInvalid naming the ack wait", err)
	}
	// The first consumer was not changed behind its back.
	ci, err := driverOf(a).consumers[consumerKey{lane: "l"}].c.Info(ctxT(t, 5*time.Second))
	if err != nil || ci.Config.AckWait != time.Second {
		t.Fatalf("consumer info %v %v: the ack wait changed", ci, err)
	}
	// A foreign consumer whose filter overlaps the lane's: a clear error.
	d := driverOf(a)
	if _, err := d.liveStream.CreateConsumer(ctxT(t, 5*time.Second), jetstream.ConsumerConfig{Durable: "foreign", FilterSubject: d.names.prefix + ".live.*", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Logf("a foreign overlapping consumer was refused by the server: %v", err)
	} else {
		_, err := a.Receive(ctxT(t, 10*time.Second), broker.ReceiveRequest{Lane: "other", Max: 1})
		if !errors.Is(err, broker.ErrInvalid) {
			t.Fatalf("receive next to an overlapping foreign consumer: %v, want ErrInvalid", err)
		}
	}
}

// TestStream_Mismatch: a stream of the namespace's name that is not a
// work-queue stream is refused with a clear error.
func TestStream_Mismatch(t *testing.T) {
	t.Parallel()
	ep := sharedEndpoint(t)
	ns := testNamespace(t)
	n := newNames(token(ns))
	nc, js := rawJS(t, ep)
	defer nc.Close()
	if _, err := js.CreateStream(ctxT(t, 5*time.Second), jetstream.StreamConfig{Name: n.live, Subjects: []string{n.prefix + ".live.>", n.delayAll}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteStreams(ep, n.live, n.dlq, n.adv) })
	_, err := broker.OpenDriver(ctxT(t, 10*time.Second), ep+"/?namespace="+ns)
	if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "workqueue") {
		t.Fatalf("open over a limits stream: %v, want ErrInvalid naming the retention", err)
	}
}

// TestPublish_AckTimeoutIsUnknownOutcome: a publish whose acknowledgement
// never comes (the server is frozen with SIGSTOP) fails within
// publish_timeout with ErrUnknownOutcome.
func TestPublish_AckTimeoutIsUnknownOutcome(t *testing.T) {
	t.Parallel()
	srv := startPrivateServer(t)
	b := openBroker(t, testURL(t, srv.URL(), "publish_timeout=500ms"), nil)
	// Create the lane's stream first, so the publish below is the only
	// round trip left to freeze.
	mustPublish(t, b, &broker.Message{Lane: "l", Kind: "warm-up"})
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer srv.cmd.Process.Signal(syscall.SIGCONT)
	waitStopped(t, srv.cmd.Process.Pid)
	start := time.Now()
	rs, err := b.Publish(ctxT(t, 10*time.Second), &broker.Message{Lane: "l", Kind: "k"})
	el := time.Since(start)
	_ = srv.cmd.Process.Signal(syscall.SIGCONT)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if !errors.Is(rs[0].Err, broker.ErrUnknownOutcome) {
		t.Fatalf("publish to a frozen server: %v, want ErrUnknownOutcome", rs[0].Err)
	}
	if el > 5*time.Second {
		t.Errorf("took %s", el)
	}
	// A retry with the same ID and key is deduplicated if the first one
	// was stored after all.
}

// TestDedup_Window: duplicates within the stream's window are one message,
// and the driver declares the window.
func TestDedup_Window(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedEndpoint(t), "dedup_window=30s"), nil)
	if c := b.Capabilities(); !c.Dedup || c.DedupWindow != 30*time.Second {
		t.Fatalf("capabilities dedup %v window %s, want true 30s", c.Dedup, c.DedupWindow)
	}
	m := func() *broker.Message {
		return &broker.Message{Lane: "l", Kind: "k", IdempotencyKey: "key", Tenant: "t"}
	}
	r1 := mustPublish(t, b, m())[0]
	rs := mustPublish(t, b, m(), m())
	for _, r := range rs {
		if !r.Duplicate || r.ID != r1.ID {
			t.Fatalf("second publish %+v, want a duplicate of %s", r, r1.ID)
		}
	}
	ds := receive(t, b, broker.ReceiveRequest{Lane: "l", Max: 10, Wait: time.Second})
	if len(ds) != 1 {
		t.Fatalf("%d deliveries, want 1", len(ds))
	}
}

// TestReceive_BatchTopsUp: a waiting Receive returns as soon as a message
// arrives, with whatever else is ready, not after the whole wait.
func TestReceive_BatchTopsUp(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedEndpoint(t), ""), nil)
	receive(t, b, broker.ReceiveRequest{Lane: "l", Max: 1})
	go func() {
		time.Sleep(300 * time.Millisecond)
		msgs := make([]*broker.Message, 20)
		for i := range msgs {
			msgs[i] = &broker.Message{Lane: "l", Kind: "k", Body: []byte(fmt.Sprint(i))}
		}
		_, _ = b.Publish(context.Background(), msgs...)
	}()
	start := time.Now()
	var got []*broker.Delivery
	for len(got) < 20 && time.Since(start) < 10*time.Second {
		got = append(got, receive(t, b, broker.ReceiveRequest{Lane: "l", Max: 20, Wait: 10 * time.Second})...)
	}
	if len(got) != 20 {
		t.Fatalf("got %d of 20", len(got))
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("receiving 20 ready messages took %s", el)
	}
	if err := b.Ack(ctxT(t, 5*time.Second), got...); err != nil {
		t.Fatal(err)
	}
}

// TestStats_OldestReady: the age of the oldest message not yet delivered.
func TestStats_OldestReady(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedEndpoint(t), ""), nil)
	if !b.Capabilities().OldestReadyAge {
		t.Fatal("OldestReadyAge not declared")
	}
	mustPublish(t, b, &broker.Message{Lane: "l", Kind: "k", Body: []byte("1")})
	time.Sleep(300 * time.Millisecond)
	mustPublish(t, b, &broker.Message{Lane: "l", Kind: "k", Body: []byte("2")})
	st, err := b.Stats(ctxT(t, 5*time.Second), "l")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != 2 || st.OldestReady < 300*time.Millisecond || st.OldestReady > 10*time.Second {
		t.Fatalf("stats %+v: want ready 2 and the oldest about 300ms old", st)
	}
	ds := receive(t, b, broker.ReceiveRequest{Lane: "l", Max: 1, Wait: time.Second})
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	st, _ = b.Stats(ctxT(t, 5*time.Second), "l")
	if st.Ready != 1 || st.OldestReady <= 0 || st.OldestReady >= 300*time.Millisecond {
		t.Fatalf("after one delivery %+v: want ready 1 and the second message's age", st)
	}
	_ = b.Ack(ctxT(t, 5*time.Second), ds...)
	ds = receive(t, b, broker.ReceiveRequest{Lane: "l", Max: 1, Wait: time.Second})
	_ = b.Ack(ctxT(t, 5*time.Second), ds...)
	if st, _ = b.Stats(ctxT(t, 5*time.Second), "l"); st.Ready != 0 || st.OldestReady != 0 {
		t.Fatalf("empty lane %+v: want no age", st)
	}
}

// waitStopped waits until the kernel reports pid stopped (state T), so a
// test does not race the SIGSTOP it just sent.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return // not Linux, or gone: nothing more to wait for
		}
		// The state follows the parenthesised command name.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d did not stop", pid)
}
