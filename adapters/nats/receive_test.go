package nats

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

// unansweredConsumer is a lane consumer whose first waiting Fetch is never
// answered: its batch neither delivers nor ends, as when the server drops
// an expired pull request without its 408. Later calls go to the server.
type unansweredConsumer struct {
	jetstream.Consumer
	once    sync.Once
	lost    chan jetstream.Msg
	fetches atomic.Int32
}

type unansweredBatch struct{ ch chan jetstream.Msg }

func (b unansweredBatch) Messages() <-chan jetstream.Msg { return b.ch }
func (b unansweredBatch) Error() error                   { return nil }

func (c *unansweredConsumer) Fetch(n int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	c.fetches.Add(1)
	lost := false
	c.once.Do(func() { lost = true })
	if lost {
		return unansweredBatch{c.lost}, nil
	}
	return c.Consumer.Fetch(n, opts...)
}

// TestReceive_UnansweredPullGivesUp: a waiting pull request the server
// never answers costs the receive at most its expiry and pullGrace, not
// the rest of the caller's wait: the receive pulls again and gets the
// message published meanwhile. Without the bound the receive hangs on the
// lost request (nats.go's own fallback is the expiry plus a second; this
// fake has none).
func TestReceive_UnansweredPullGivesUp(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedEndpoint(t), "pull_expiry=200ms"), nil)
	d := b.Driver().(*Driver)
	lc, err := d.consumer(ctxT(t, 10*time.Second), "l", false)
	if err != nil {
		t.Fatal(err)
	}
	fake := &unansweredConsumer{Consumer: lc.c, lost: make(chan jetstream.Msg)}
	t.Cleanup(func() { close(fake.lost) }) // ends the abandoned batch's nakRest
	lc.c = fake

	go func() {
		time.Sleep(100 * time.Millisecond) // during the lost request
		_, _ = b.Publish(context.Background(), &broker.Message{Lane: "l", Kind: "k", Body: []byte("x")})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 1, Wait: 30 * time.Second})
	el := time.Since(start)
	if err != nil {
		t.Fatalf("receive: %v (after %s)", err, el)
	}
	if len(ds) != 1 {
		t.Fatalf("got %d deliveries after %s, want the message published during the lost pull", len(ds), el)
	}
	if n := fake.fetches.Load(); n < 2 {
		t.Fatalf("%d waiting fetches, want the lost one and another", n)
	}
	// The bound is 200 ms + pullGrace(200 ms) = 450 ms; the caller's wait
	// is 30 s. A generous margin, for loaded machines.
	if el > 15*time.Second {
		t.Errorf("receive took %s: it waited on the unanswered pull request", el)
	}
	if err := b.Ack(ctxT(t, 5*time.Second), ds...); err != nil {
		t.Fatal(err)
	}
}
