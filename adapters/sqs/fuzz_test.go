package sqs

import (
	"bytes"
	"errors"
	"maps"
	"net/url"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// FuzzDecodeBody: no SQS message body makes the decoder panic; refusals
// are broker.ErrUndecodable; a decoded message encodes back to a body that
// decodes to the same message.
func FuzzDecodeBody(f *testing.F) {
	m := &broker.Message{ID: "01a2", Lane: "interactive", Kind: "email.send", Tenant: "acme", IdempotencyKey: "k", OrderingKey: "o",
		Headers: map[string]string{"traceparent": "00-1"}, RunAt: time.Unix(1700000000, 123456789).UTC(), MaxAttempts: 7}
	for _, body := range [][]byte{nil, []byte(`{"to":"a@example.com"}`), []byte("\x00\xff binary"), []byte("~looks like a mark\n")} {
		c := *m
		c.Body = body
		f.Add(encodeBody(&c))
	}
	for _, s := range []string{"", "~", "~\n", "~!!\nx", "not base64", "U1k=", "~U1kB\nbody", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := decodeBody(s)
		if err != nil {
			if !errors.Is(err, broker.ErrUndecodable) {
				t.Fatalf("decodeBody(%q) = %v, not ErrUndecodable", s, err)
			}
			return
		}
		if m.Kind == "" {
			t.Fatalf("decodeBody(%q) gave a message without a kind", s)
		}
		again, err := decodeBody(encodeBody(m))
		if err != nil {
			t.Fatalf("re-encoded body does not decode: %+v: %v", m, err)
		}
		if again.ID != m.ID || again.Kind != m.Kind || !bytes.Equal(again.Body, m.Body) || again.Tenant != m.Tenant ||
			again.IdempotencyKey != m.IdempotencyKey || again.OrderingKey != m.OrderingKey || !again.RunAt.Equal(m.RunAt) ||
			!again.EnqueuedAt.Equal(m.EnqueuedAt) || again.MaxAttempts != m.MaxAttempts || !maps.Equal(again.Headers, m.Headers) {
			t.Fatalf("round trip changed the message:\n%+v\n%+v", m, again)
		}
	})
}

// FuzzParseURL: no sqs:// URL makes the parser panic, and refusals are
// broker.ErrInvalid.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"sqs://?namespace=myapp&region=eu-west-1&fifo=true&endpoint=http://127.0.0.1:9324", "sqs://",
		"sqs://host", "sqs://u:p@/", "sqs://?max_receives=0&max_message_size=-1", "sqs://?namespace=a.b", "sqs://?fifo=maybe",
		"sqs:opaque", "rabbitmq://h"} {
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
