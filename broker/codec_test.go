package broker_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/codec"
)

const marker = "PLAINTEXT-MARKER-7f3a"

func testCodec(t testing.TB, keys string) *codec.AEAD {
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

func k32(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }

func openCodec(t *testing.T, url string, c broker.Codec) *broker.Broker {
	t.Helper()
	b, err := broker.Open(context.Background(), url, &broker.Options{Codec: c, MaxDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// rawBodies leases every message of lane (dead letters with dead) straight
// from the driver, gives them back, and returns their bodies as stored.
func rawBodies(t *testing.T, b *broker.Broker, lane string, dead bool) [][]byte {
	t.Helper()
	ctx := context.Background()
	var ds []*broker.Delivery
	for end := time.Now().Add(3 * time.Second); len(ds) == 0 && time.Now().Before(end); {
		var err error
		ds, err = b.Driver().Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 100, Lease: time.Second, Wait: 100 * time.Millisecond, DeadLetters: dead})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(ds) == 0 {
		t.Fatalf("no message in %s (dead letters: %v)", lane, dead)
	}
	var out [][]byte
	for _, d := range ds {
		out = append(out, d.Body)
		r := b.Driver().(broker.Releaser)
		if err := r.Release(ctx, d, 0); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func noMarker(t *testing.T, what string, bodies [][]byte) {
	t.Helper()
	for _, body := range bodies {
		if bytes.Contains(body, []byte(marker)) || !codec.IsSealed(body) {
			t.Fatalf("%s: stored body is not sealed: %q", what, body)
		}
	}
}

// TestBroker_Codec: with Options.Codec the driver only ever holds sealed
// bodies — after publish, a held nack, a dead-letter and a replay — and
// Broker's callers see the plaintext, dead letters included.
func TestBroker_Codec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "embedded://" + filepath.Join(t.TempDir(), "q.db") + "?reduced=true"
	b := openCodec(t, url, testCodec(t, "k1:"+k32(1)))
	body := []byte(`{"secret":"` + marker + `"}`)
	m := &broker.Message{Lane: "batch", Kind: "k", Body: body}
	if _, err := b.PublishOne(ctx, m); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Body, body) {
		t.Fatal("Publish changed the caller's body")
	}
	noMarker(t, "after publish", rawBodies(t, b, "batch", false))

	get := func(dead bool) *broker.Delivery {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: 10 * time.Second, Wait: 200 * time.Millisecond, DeadLetters: dead})
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) == 1 {
				if !bytes.Equal(ds[0].Body, body) {
					t.Fatalf("received body %q, want the plaintext", ds[0].Body)
				}
				return ds[0]
			}
		}
		t.Fatal("nothing received")
		return nil
	}
	// A nack beyond MaxDelay is held: Broker re-publishes the message.
	if err := b.Nack(ctx, get(false), 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	noMarker(t, "after a held nack", rawBodies(t, b, "batch", false))
	if err := b.Release(ctx, get(false), 0); err != nil {
		t.Fatal(err)
	}
	if err := b.DeadLetter(ctx, get(false), &broker.DeadLetter{Reason: broker.ReasonPermanent}); err != nil {
		t.Fatal(err)
	}
	noMarker(t, "after dead-lettering", rawBodies(t, b, "batch", true))
	if err := b.Replay(ctx, get(true)); err != nil {
		t.Fatal(err)
	}
	noMarker(t, "after replay", rawBodies(t, b, "batch", false))
	if err := b.Ack(ctx, get(false)); err != nil {
		t.Fatal(err)
	}
}

// TestBroker_CodecUndecodable: a body that does not open — plaintext from a
// publisher without the codec, a body sealed for another message, one
// sealed under a key the consumer lacks, a tampered one — is dead-lettered
// with reason undecodable, stored as it came, and never delivered.
func TestBroker_CodecUndecodable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "embedded://" + filepath.Join(t.TempDir(), "q.db")
	c1 := testCodec(t, "k1:"+k32(1))
	b := openCodec(t, url, c1)
	other := openCodec(t, url, testCodec(t, "k2:"+k32(2)))
	plain := openCodec(t, url, nil)

	moved, _ := c1.Seal(ctx, []byte("{}"), broker.BodyAAD(&broker.Message{ID: "a", Kind: "k"}))
	tampered, _ := c1.Seal(ctx, []byte("{}"), broker.BodyAAD(&broker.Message{ID: "t", Kind: "k"}))
	tampered[len(tampered)-1] ^= 1
	if _, err := plain.PublishOne(ctx, &broker.Message{ID: "plain", Lane: "batch", Kind: "k", Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.PublishOne(ctx, &broker.Message{ID: "moved", Lane: "batch", Kind: "k", Body: moved}); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.PublishOne(ctx, &broker.Message{ID: "t", Lane: "batch", Kind: "k", Body: tampered}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.PublishOne(ctx, &broker.Message{ID: "otherkey", Lane: "batch", Kind: "k", Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: 10 * time.Second, Wait: 300 * time.Millisecond})
	if err != nil || len(ds) != 0 {
		t.Fatalf("Receive = %d deliveries, %v; want none", len(ds), err)
	}
	dead, err := plain.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: 10 * time.Second, DeadLetters: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, d := range dead {
		if d.DeadLetter.Reason != broker.ReasonUndecodable {
			t.Errorf("%s: reason %s, want undecodable", d.ID, d.DeadLetter.Reason)
		}
		got[d.ID] = true
	}
	for _, id := range []string{"plain", "moved", "t", "otherkey"} {
		if !got[id] {
			t.Errorf("%s is not in the dead-letter queue", id)
		}
	}
	if st, _ := b.Stats(ctx, "batch"); st.Ready+st.InFlight != 0 {
		t.Errorf("live lane still holds %+v", st)
	}
}

type downProvider struct{ codec.KeyProvider }

func (downProvider) UnwrapDataKey(context.Context, string, []byte) ([]byte, error) {
	return nil, errors.New("key service unreachable")
}

// TestBroker_CodecKeyServiceDown: a body the codec cannot open for now is
// not dead-lettered: Receive reports a transient error and the message
// comes back once the key service answers.
func TestBroker_CodecKeyServiceDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "embedded://" + filepath.Join(t.TempDir(), "q.db")
	r, _ := codec.ParseKeys("k1:" + k32(1))
	good, _ := codec.New(r, nil)
	down, _ := codec.New(downProvider{r}, nil)
	if _, err := openCodec(t, url, good).PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	_, err := openCodec(t, url, down).Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: 200 * time.Millisecond})
	if err == nil || broker.ClassOf(err) != broker.Transient {
		t.Fatalf("Receive with the key service down: %v, want a transient error", err)
	}
	time.Sleep(300 * time.Millisecond)
	ds, err := openCodec(t, url, good).Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Second, Wait: 2 * time.Second})
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "{}" {
		t.Fatalf("after the outage: %v, %v", ds, err)
	}
}

// TestBroker_CodecNoDoubleSeal: a body already sealed (a dead letter that
// did not open, re-published as stored) is sent as it is, so the right
// key still opens it.
func TestBroker_CodecNoDoubleSeal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "embedded://" + filepath.Join(t.TempDir(), "q.db")
	c1 := testCodec(t, "k1:"+k32(1))
	m := &broker.Message{ID: "m1", Lane: "batch", Kind: "k"}
	sealed, _ := c1.Seal(ctx, []byte("{}"), broker.BodyAAD(m))
	m.Body = sealed
	if _, err := openCodec(t, url, testCodec(t, "k2:"+k32(2))).PublishOne(ctx, m); err != nil {
		t.Fatal(err)
	}
	ds, err := openCodec(t, url, c1).Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Second, Wait: time.Second})
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "{}" {
		t.Fatalf("Receive = %v, %v", ds, err)
	}
}
