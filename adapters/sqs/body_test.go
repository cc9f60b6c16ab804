package sqs

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

func TestBody_RoundTrip(t *testing.T) {
	t.Parallel()
	base := broker.Message{ID: "01a2", Lane: "interactive", Kind: "email.send", Tenant: "acme", IdempotencyKey: "k", OrderingKey: "o",
		Headers: map[string]string{"traceparent": "00-1", "x": "y"}, RunAt: time.Unix(1700000000, 123456789).UTC(),
		EnqueuedAt: time.Unix(1700000001, 0).UTC(), MaxAttempts: 7}
	for _, body := range [][]byte{nil, []byte(`{"to":"a@example.com"}`), []byte("line\nline\n"), []byte("ünïcode ✓"),
		[]byte("\x00\xff binary"), []byte("~looks like a mark\n"), []byte{0xef, 0xbf, 0xbe}} {
		m := base
		m.Body = body
		s := encodeBody(&m)
		if !validSQSText([]byte(s)) {
			t.Errorf("body %q: encoded form is not valid SQS text", body)
		}
		text := validSQSText(body)
		if text != strings.HasPrefix(s, "~") {
			t.Errorf("body %q: text form = %v, want %v", body, !text, text)
		}
		got, err := decodeBody(s)
		if err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		if !bytes.Equal(got.Body, body) || got.ID != m.ID || got.Kind != m.Kind || !got.RunAt.Equal(m.RunAt) || got.Headers["x"] != "y" || got.MaxAttempts != 7 {
			t.Errorf("body %q: round trip gave %+v", body, got)
		}
	}
}

func TestBody_Garbage(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	inputs := []string{"", "~", "~\n", "~!!\nx", "not base64", "U1k=", "~U1kB\nbody", "\x00\xff"}
	for i := 0; i < 2000; i++ {
		b := make([]byte, r.IntN(64))
		for j := range b {
			b[j] = byte(r.UintN(256))
		}
		if r.IntN(2) == 0 && len(b) > 0 {
			b[0] = '~'
		}
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		m, err := decodeBody(in)
		if err == nil && m.Kind == "" {
			t.Errorf("%q decoded to a message without a kind", in)
		}
		if err != nil && !errors.Is(err, broker.ErrUndecodable) {
			t.Errorf("%q: error %v does not match ErrUndecodable", in, err)
		}
	}
}
