package rabbitmq

import (
	"net/url"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

var _ broker.NackErrorer = (*Driver)(nil)

// TestNackWithError_Header: NackWithError republishes the message with
// the failed attempt's error in AMQP header switchyard-last-error (where
// RabbitMQ's tools show it), attempts counting on as with Nack.
func TestNackWithError_Header(t *testing.T) {
	t.Parallel()
	u := testURL(t, newNS(t), "", "", url.Values{})
	t.Cleanup(func() { cleanupNamespace(u, "work") })
	d := openDriver(t, u)
	ctx := ctxT(t, time.Minute)
	m := &broker.Message{Lane: "work", Kind: "k", Body: []byte("x"), MaxAttempts: 5}
	mustPublish(t, d, m)
	first := receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, 10*time.Second)
	if first == nil {
		t.Fatal("nothing received")
	}
	if l, _ := leaseOf("test", first); l.raw.Headers[hdrLastError] != nil {
		t.Fatalf("a fresh message carries %s: %v", hdrLastError, l.raw.Headers[hdrLastError])
	}
	if err := d.NackWithError(ctx, first, 0, "upstream 503: try later"); err != nil {
		t.Fatal(err)
	}
	second := receiveOne(t, d, broker.ReceiveRequest{Lane: "work", Lease: time.Minute}, 10*time.Second)
	if second == nil || second.ID != m.ID || second.Attempt != 2 {
		t.Fatalf("redelivery: %+v", second)
	}
	l, err := leaseOf("test", second)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := l.raw.Headers[hdrLastError].(string); got != "upstream 503: try later" {
		t.Errorf("header %s = %v, want the error", hdrLastError, l.raw.Headers[hdrLastError])
	}
	if err := d.Ack(ctx, []*broker.Delivery{second}); err != nil {
		t.Fatal(err)
	}
}
