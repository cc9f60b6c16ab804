package gcppubsub

import (
	"bytes"
	"errors"
	"maps"
	"net/url"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// FuzzDecodeLive: no message data makes the live decoder panic; refusals
// are broker.ErrUndecodable; a decoded message encodes back to data that
// decodes to the same message.
func FuzzDecodeLive(f *testing.F) {
	m := &broker.Message{ID: "01a2", Lane: "interactive", Kind: "email.send", Tenant: "acme", IdempotencyKey: "k", OrderingKey: "o",
		Headers: map[string]string{"traceparent": "00-1"}, RunAt: time.Unix(1700000000, 123456789).UTC(), MaxAttempts: 7}
	for _, body := range [][]byte{nil, []byte(`{"to":"a@example.com"}`), []byte("\x00\xff binary")} {
		c := *m
		c.Body = body
		f.Add(broker.EncodeEnvelope(&c))
	}
	for _, s := range []string{"", "SY", "SY\x01", "SY\x02", "{foreign}", "\x00\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeLive(data)
		if err != nil {
			if !errors.Is(err, broker.ErrUndecodable) {
				t.Fatalf("decodeLive(%q) = %v, not ErrUndecodable", data, err)
			}
			return
		}
		if m.Kind == "" || m.Lane == "" || m.ID == "" {
			t.Fatalf("decodeLive(%q) gave a message without a kind, lane or ID", data)
		}
		again, err := decodeLive(broker.EncodeEnvelope(m))
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %+v: %v", m, err)
		}
		if again.ID != m.ID || again.Kind != m.Kind || !bytes.Equal(again.Body, m.Body) || again.Tenant != m.Tenant ||
			again.IdempotencyKey != m.IdempotencyKey || again.OrderingKey != m.OrderingKey || !again.RunAt.Equal(m.RunAt) ||
			!again.EnqueuedAt.Equal(m.EnqueuedAt) || again.MaxAttempts != m.MaxAttempts || !maps.Equal(again.Headers, m.Headers) {
			t.Fatalf("round trip changed the message:\n%+v\n%+v", m, again)
		}
	})
}

// FuzzUnframeDead: no dead-letter data makes the frame decoder panic;
// refusals are broker.ErrUndecodable; a frame built from a decoded record
// decodes to the same record and original data.
func FuzzUnframeDead(f *testing.F) {
	rec, _ := broker.EncodeDeadLetter(&broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "boom",
		Attempts: []broker.AttemptRecord{{Attempt: 1, Error: "boom"}}, At: time.Unix(1700000000, 0).UTC()})
	f.Add(frameDead(rec, []byte("original")))
	f.Add(frameDead(nil, nil))
	for _, s := range []string{"", "\xff\xff\xff", "\x05{}", "\x02{}rest", "\x80"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dl, orig, err := unframeDead(data)
		if err != nil {
			if !errors.Is(err, broker.ErrUndecodable) {
				t.Fatalf("unframeDead(%q) = %v, not ErrUndecodable", data, err)
			}
			return
		}
		b, err := encodeRecord(dl, len(orig), 1<<30)
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		dl2, orig2, err := unframeDead(frameDead(b, orig))
		if err != nil || !bytes.Equal(orig, orig2) || dl2.Reason != dl.Reason || dl2.Error != dl.Error || len(dl2.Attempts) != len(dl.Attempts) {
			t.Fatalf("round trip: %+v %q -> %+v %q (%v)", dl, orig, dl2, orig2, err)
		}
	})
}

// FuzzParseURL: no gcppubsub:// URL makes the parser panic, refusals are
// broker.ErrInvalid, and an accepted configuration is valid.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"gcppubsub://my-project?namespace=myapp&ordering=true&exactly_once=true",
		"gcppubsub://switchyard-test?emulator=127.0.0.1:8085&max_message_size=1048576", "gcppubsub://", "gcppubsub://p",
		"gcppubsub://u:p@my-project", "gcppubsub://my-project:443", "gcppubsub://my-project/path", "gcppubsub://my-project?max_deliveries=4",
		"gcppubsub://my-project?namespace=goog-x", "gcppubsub://my-project?emulator=h:0", "gcppubsub://my-project?ordering=maybe",
		"gcppubsub:opaque", "rabbitmq://h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		c, err := ParseURL(u)
		if err != nil {
			if !errors.Is(err, broker.ErrInvalid) {
				t.Fatalf("ParseURL(%q) = %v, not ErrInvalid", s, err)
			}
			return
		}
		if p := c.problems(); len(p) > 0 {
			t.Fatalf("ParseURL(%q) accepted a config with problems %v", s, p)
		}
	})
}
