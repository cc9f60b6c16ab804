package asynq

import (
	"bytes"
	"errors"
	"maps"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// FuzzDecodeTaskMessage: no stored task message makes the decoder or the
// mapping to a portable message panic; refusals are errBadProto (decoder)
// and broker.ErrUndecodable (mapping); a decoded message re-encodes to the
// same bytes, and a mapped message maps back and forth unchanged.
func FuzzDecodeTaskMessage(f *testing.F) {
	m := &broker.Message{ID: "01a2", Kind: "email.send", Body: []byte(`{"to":"a"}`), Tenant: "acme", IdempotencyKey: "k",
		OrderingKey: "o", Headers: map[string]string{"traceparent": "00-1"}, RunAt: time.Unix(1700000000, 5).UTC(),
		EnqueuedAt: time.Unix(1700000001, 0).UTC(), MaxAttempts: 7}
	if t, err := toTask(m, "q"); err == nil {
		f.Add(t.encode(), "01a2")
	}
	unset := *m
	unset.MaxAttempts, unset.Headers = 0, nil
	if t, err := toTask(&unset, "q"); err == nil {
		f.Add(t.encode(), "01a2")
	}
	plain := &taskMessage{Type: "plain", ID: "p1", Queue: "default", Retry: 25, Payload: []byte("x"), Timeout: 1800, Deadline: -1}
	f.Add(plain.encode(), "p1")
	f.Add([]byte{}, "")
	f.Add([]byte{0x0a, 0x80}, "x")                         // truncated length
	f.Add([]byte{0x7a, 0x04, 0x0a, 0x01, 0xff, 0x12}, "x") // header entry, bad UTF-8
	f.Add([]byte{0xf8, 0xff, 0xff, 0xff, 0x0f, 0x00}, "x") // unknown field
	f.Fuzz(func(t *testing.T, b []byte, id string) {
		tm, err := decodeTaskMessage(b)
		if err != nil {
			if !errors.Is(err, errBadProto) {
				t.Fatalf("decode error %v is not errBadProto", err)
			}
			return
		}
		enc := tm.encode()
		again, err := decodeTaskMessage(enc)
		if err != nil {
			t.Fatalf("re-encoded task message does not decode: %v", err)
		}
		if !bytes.Equal(again.encode(), enc) {
			t.Fatalf("round trip changed the task message: %+v vs %+v", tm, again)
		}
		msg, err := fromTask(tm, id, "lane")
		if err != nil {
			if !errors.Is(err, broker.ErrUndecodable) {
				t.Fatalf("fromTask error %v is not ErrUndecodable", err)
			}
			return
		}
		back, err := toTask(msg, "q")
		if err != nil {
			if !errors.Is(err, broker.ErrInvalid) {
				t.Fatalf("toTask error %v is not ErrInvalid", err)
			}
			return
		}
		msg2, err := fromTask(back, msg.ID, "lane")
		if err != nil {
			t.Fatalf("a mapped message does not map back: %+v: %v", msg, err)
		}
		if msg2.ID != msg.ID || msg2.Kind != msg.Kind || !bytes.Equal(msg2.Body, msg.Body) || msg2.Tenant != msg.Tenant ||
			msg2.IdempotencyKey != msg.IdempotencyKey || msg2.OrderingKey != msg.OrderingKey || !msg2.RunAt.Equal(msg.RunAt) ||
			!msg2.EnqueuedAt.Equal(msg.EnqueuedAt) || msg2.MaxAttempts != msg.MaxAttempts || !maps.Equal(msg2.Headers, msg.Headers) {
			t.Fatalf("mapping round trip changed the message:\n%+v\n%+v", msg, msg2)
		}
	})
}

// FuzzParseURL: no redis:// URL makes the parser panic; refusals are
// broker.ErrInvalid and never quote the password.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redis://", "redis://:s3cret@redis.example:6380/3?namespace=prod", "rediss://app:pw@h/0?tls_server_name=x",
		"redis://h:99999", "redis://h/x", "redis://h?poll=-1s&max_batch=0", "redis://[::1]:6379/15?pool_size=3",
		"redis://u:hunter22@h/0?bogus=1", "rediss://h?tls_insecure_skip_verify=maybe", "redis:opaque", "http://h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		// A password no error text can hold by chance.
		const p = "Pw-9f2Q-7xK"
		_, hasPw := u.User.Password()
		if hasPw {
			u.User = url.UserPassword(u.User.Username(), p)
		}
		_, err = ParseURL(u)
		if err == nil {
			return
		}
		if !errors.Is(err, broker.ErrInvalid) {
			t.Fatalf("ParseURL(%q) = %v, not ErrInvalid", s, err)
		}
		if hasPw && strings.Contains(err.Error(), p) {
			t.Fatalf("ParseURL(%q) = %v: the error quotes the password", s, err)
		}
	})
}
