package nats

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestParsePubAck: a plain acknowledgement is read without decoding; a
// duplicate carries its stored sequence; a refusal is the server's API
// error; anything else is an invalid acknowledgement.
func TestParsePubAck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		data    string
		dup     bool
		seq     uint64
		errCode jetstream.ErrorCode
		invalid bool
	}{
		{name: "plain", data: `{"stream":"SWY_x","seq":42}`},
		{name: "plain with domain", data: `{"stream":"SWY_x","domain":"hub","seq":42}`},
		{name: "duplicate", data: `{"stream":"SWY_x","seq":7,"duplicate":true}`, dup: true, seq: 7},
		{name: "refused", data: `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`, errCode: 10077},
		{name: "refused, stream first", data: `{"stream":"SWY_x","error":{"code":400,"err_code":10060,"description":"expected stream does not match"}}`, errCode: 10060},
		{name: "not JSON", data: `+OK`, invalid: true},
		{name: "no stream", data: `{"seq":1}`, invalid: true},
	} {
		r := parsePubAck(3, []byte(c.data))
		if r.i != 3 {
			t.Errorf("%s: index %d, want 3", c.name, r.i)
		}
		switch {
		case c.invalid:
			if !errors.Is(r.err, jetstream.ErrInvalidJSAck) {
				t.Errorf("%s: err %v, want ErrInvalidJSAck", c.name, r.err)
			}
		case c.errCode != 0:
			var apiErr *jetstream.APIError
			if !errors.As(r.err, &apiErr) || apiErr.ErrorCode != c.errCode {
				t.Errorf("%s: err %v, want API error %d", c.name, r.err, c.errCode)
			}
		default:
			if r.err != nil || r.ack.Duplicate != c.dup || (c.dup && r.ack.Sequence != c.seq) {
				t.Errorf("%s: %+v, want duplicate %v seq %d", c.name, r, c.dup, c.seq)
			}
		}
	}
}

// TestPublish_NoStream: with no stream listening on the lane's subject,
// a publish (retried, as nats.go's asynchronous publish does) fails as
// transient, nothing stored, instead of waiting for publish_timeout with an
// unknown outcome.
func TestPublish_NoStream(t *testing.T) {
	t.Parallel()
	b := openBroker(t, testURL(t, sharedEndpoint(t), "publish_timeout=20s"), nil)
	d := driverOf(b)
	mustPublish(t, b, &broker.Message{Lane: "l", Kind: "k"})
	if err := d.liveStream.Purge(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	live, _, _ := d.StreamNames()
	if err := d.js.DeleteStream(ctxT(t, 10*time.Second), live); err != nil {
		t.Fatal(err)
	}
	rs, err := b.Publish(ctxT(t, 30*time.Second), &broker.Message{Lane: "l", Kind: "k"}, &broker.Message{Lane: "l", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Err == nil || broker.ClassOf(r.Err) != broker.Transient || !errors.Is(r.Err, jetstream.ErrNoStreamResponse) {
			t.Errorf("publish %d: %v (class %v), want a transient ErrNoStreamResponse", i, r.Err, broker.ClassOf(r.Err))
		}
	}
}
