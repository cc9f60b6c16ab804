package sqs

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/switchyard-dev/switchyard/broker"
)

// lateTransport lets ReceiveMessage requests reach the server and then
// holds their responses for hold, as a slow network would: the server has
// leased the messages already. A request whose context ends while its
// response is held fails with the context's error and its response is
// dropped, as the SDK's HTTP client does.
type lateTransport struct {
	base http.RoundTripper
	hold time.Duration
	late atomic.Bool // hold the responses
}

func (l *lateTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("X-Amz-Target") != "AmazonSQS.ReceiveMessage" || !l.late.Load() {
		return l.base.RoundTrip(r)
	}
	resp, err := l.base.RoundTrip(r.Clone(context.WithoutCancel(r.Context())))
	if err != nil {
		return nil, err
	}
	select {
	case <-time.After(l.hold):
		return resp, nil
	case <-r.Context().Done():
		resp.Body.Close()
		return nil, r.Context().Err()
	}
}

// TestReceiveCancelledMidResponse: a Receive whose context ends while the
// ReceiveMessage response is on the way (the server has leased its
// messages) returns with the context's error — a long poll at once, a
// short poll when its round trip ends (it runs on its caller's goroutine)
// — and the messages are visible again right after the response lands,
// not after their visibility timeout. Their next delivery is their second
// (ApproximateReceiveCount counts the abandoned one).
func TestReceiveCancelledMidResponse(t *testing.T) {
	t.Run("long poll", func(t *testing.T) { receiveCancelledMidResponse(t, 2*time.Second) }) // WaitTimeSeconds 1
	t.Run("short poll", func(t *testing.T) { receiveCancelledMidResponse(t, 0) })
}

func receiveCancelledMidResponse(t *testing.T, wait time.Duration) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u := lossyURL(t, false)
	defer deleteTestNamespace(u)
	lt := &lateTransport{base: awshttp.NewBuildableClient().GetTransport(), hold: 500 * time.Millisecond}
	d, err := openWithHTTPClient(ctx, u, &http.Client{Transport: lt})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	msgs := make([]*broker.Message, 3)
	for i := range msgs {
		msgs[i] = &broker.Message{ID: broker.NewID(), Lane: "a", Kind: "k", Body: []byte(`{}`), EnqueuedAt: time.Now()}
	}
	if rs, err := d.Publish(ctx, msgs); err != nil || rs[0].Err != nil {
		t.Fatalf("publish: %v %v", err, rs)
	}
	lt.late.Store(true)
	rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	start := time.Now()
	ds, err := d.Receive(rctx, broker.ReceiveRequest{Lane: "a", Max: 10, Lease: time.Minute, Wait: wait})
	rcancel()
	if len(ds) != 0 || !broker.IsContext(err) {
		t.Fatalf("cancelled receive returned %d deliveries, error %v; want none and a context error", len(ds), err)
	}
	if el := time.Since(start); wait > 0 && el > 400*time.Millisecond {
		t.Errorf("cancelled long poll returned after %s, not when its context ended", el)
	}
	lt.late.Store(false)
	// A minute's visibility timeout: what comes back within the 20 s
	// here was given back.
	got := map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < len(msgs) && time.Now().Before(deadline) {
		ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: "a", Max: 10, Lease: time.Minute, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, dv := range ds {
			got[dv.ID] = dv.Attempt
		}
	}
	if len(got) != len(msgs) {
		t.Fatalf("%d of %d messages came back after the cancelled receive: the others stay leased for their visibility timeout", len(got), len(msgs))
	}
	for id, a := range got {
		if a != 2 {
			t.Errorf("message %s came back on attempt %d, want 2 (the abandoned receive counts)", id, a)
		}
	}
}
