package nats

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

// FuzzParseURL: no nats:// URL makes the parser panic; refusals are
// broker.ErrInvalid and never quote the password or the token.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"nats://", "nats://u:s3cret@h:4222/ns?ack_wait=5s", "nats://tok@h", "nats://h?token=abc&max_deliver=-1",
		"nats://a,b", "nats://h/ns?namespace=other", "nats://h?storage=disk&replicas=9", "nats://h?pull_expiry=1h",
		"nats://h?tls_ca=x", "nats:opaque", "nats://h:", "nats://u:p@h?token=t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		// Secrets no error text can hold by chance.
		const pw, tok = "Pw-9f2Q-7xK", "Tk-3hV8-1zR"
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), pw)
			} else {
				u.User = url.User(tok)
			}
		}
		if q, err := url.ParseQuery(u.RawQuery); err == nil && q.Has("token") {
			q.Set("token", tok)
			u.RawQuery = q.Encode()
		}
		_, err = parseURL(u)
		if err == nil {
			return
		}
		if !errors.Is(err, broker.ErrInvalid) {
			t.Fatalf("parseURL(%q) = %v, not ErrInvalid", s, err)
		}
		if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), tok) {
			t.Fatalf("parseURL(%q) = %v: the error quotes a secret", s, err)
		}
	})
}

// fakeMsg is a dead-letter stream message with the given data and headers.
type fakeMsg struct {
	jetstream.Msg // nil: only the methods below are called
	data          []byte
	hdr           natsgo.Header
}

func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: 42}, NumDelivered: 1, Timestamp: time.Unix(1700000000, 0)}, nil
}
func (m *fakeMsg) Data() []byte                { return m.data }
func (m *fakeMsg) Headers() natsgo.Header      { return m.hdr }
func (m *fakeMsg) Subject() string             { return "x" }
func (m *fakeMsg) InProgress() error           { return nil }
func (m *fakeMsg) Reply() string               { return "" }
func (m *fakeMsg) Ack() error                  { return nil }
func (m *fakeMsg) Nak() error                  { return nil }
func (m *fakeMsg) Term() error                 { return nil }
func (m *fakeMsg) TermWithReason(string) error { return nil }

// FuzzDeadLetterHeaders: a dead-letter stream message with any headers
// and data (anyone with access to the stream can publish one) maps to a
// dead letter with a reason, an ID and an attempt number not below 0.
func FuzzDeadLetterHeaders(f *testing.F) {
	dl, _ := broker.EncodeDeadLetter(&broker.DeadLetter{Reason: broker.ReasonMaxAttempts, Error: "e", At: time.Unix(1, 0).UTC()})
	env := broker.EncodeEnvelope(&broker.Message{ID: "01a2", Kind: "k", Body: []byte("b")})
	f.Add(env, string(dl), "01a2", "3")
	f.Add([]byte("raw"), "", "", "")
	f.Add([]byte{}, `{}`, "x", "-7")
	f.Add(env, `{"Reason":`, "", "99999999999999999999")
	f.Fuzz(func(t *testing.T, data []byte, dead, id, attempt string) {
		hdr := natsgo.Header{}
		for k, v := range map[string]string{headerDeadLetter: dead, headerID: id, headerAttempt: attempt} {
			if v != "" {
				hdr.Set(k, v)
			}
		}
		d := &Driver{kept: map[*handle]struct{}{}}
		lc := &laneConsumer{lane: "batch", dlq: true, wait: time.Second}
		dv := d.toDelivery(context.Background(), lc, &fakeMsg{data: data, hdr: hdr}, time.Now(), time.Second)
		if dv == nil || dv.DeadLetter == nil || dv.DeadLetter.Reason == "" || dv.ID == "" || dv.Attempt < 0 || dv.Lane != "batch" {
			t.Fatalf("dead letter of data %q, headers %v: %+v", data, hdr, dv)
		}
	})
}
