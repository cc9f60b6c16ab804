package postgres

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
)

// FuzzParseURL: no postgres:// URL makes the parser panic; refusals are
// broker.ErrInvalid and never quote the password.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"postgres://u:s3cret@h:5432/db?schema=q&sslmode=disable",
		"postgresql://h/db?dedup_window=1h&max_message_size=2048&max_batch=10&poll=250ms&create=false",
		"postgres://h/db?schema=pg_x", "postgres://h/db?schema=Bad-Name", "postgres://h/db?search_path=x",
		"postgres://h/db?no_such=1", "postgres://h/db?max_message_size=999999999", "postgres://h/db?max_batch=0",
		"postgres://h/db?schema=a&schema=b", "postgres:opaque", "postgres://h/db#frag", "postgres://h/db?poll=-1s",
		"postgres://h/db?pool_max_conns=8&application_name=x", "postgres://u:p@h/db?default_max_attempts=2000000",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		// A secret no error text can hold by chance.
		const pw = "Pw-9f2Q-7xK"
		if u.User != nil {
			u.User = url.UserPassword(u.User.Username(), pw)
		}
		c, err := parseURL(u)
		if err == nil {
			if verr := validSchema(c.Schema); verr != nil {
				t.Fatalf("parseURL(%q) accepted schema %q: %v", s, c.Schema, verr)
			}
			if c.MaxMessageSize <= 0 || c.MaxMessageSize > MaxMessageSizeLimit || c.MaxBatch <= 0 || c.MaxBatch > MaxBatchLimit {
				t.Fatalf("parseURL(%q) accepted out-of-range limits %+v", s, c)
			}
			return
		}
		if !errors.Is(err, broker.ErrInvalid) {
			t.Fatalf("parseURL(%q) = %v, not ErrInvalid", s, err)
		}
		if strings.Contains(err.Error(), pw) {
			t.Fatalf("parseURL(%q) = %v: the error quotes the password", s, err)
		}
	})
}

// FuzzDecodeRow: no row, however corrupt (written behind the driver's
// back), makes the decoder panic; a row it accepts is a message the
// framework accepts (it validates and passes CheckDecoded), and a refusal
// matches ErrUndecodable, so the row is dead-lettered with that reason.
func FuzzDecodeRow(f *testing.F) {
	f.Add("01J0000000000000000000000", "email.send", []byte(`{"traceparent":"00-x"}`), "acme", "k", "o", int64(1), int64(2), int32(3), int32(1), []byte("body"))
	f.Add("", "", []byte("\x00\xffnot json"), "", "", "", int64(0), int64(0), int32(0), int32(0), []byte(nil))
	f.Add("bad\nid", "k", []byte(`{"a":1}`), "", "", "", int64(-1), int64(0), int32(-5), int32(-1), []byte{})
	f.Add(strings.Repeat("i", 300), "bad kind!", []byte(`[]`), "t\x01", "", "", int64(1<<62), int64(-1<<62), int32(2000000), int32(2147483647), []byte("x"))
	f.Add("id", "k", []byte(`null`), "", "", "", int64(0), int64(0), int32(0), int32(1), []byte("x"))
	f.Fuzz(func(t *testing.T, id, kind string, headers []byte, tenant, idem, ord string, runAt, enq int64, maxAtt, attempts int32, body []byte) {
		r := &row{seq: 1, id: id, kind: kind, headers: headers, tenant: tenant, idemKey: idem, ordKey: ord, runAt: runAt, enqueuedAt: enq,
			maxAttempts: maxAtt, attempts: attempts, body: body}
		dv, err := decodeRow("batch", r)
		if dv == nil {
			t.Fatal("decodeRow returned no delivery")
		}
		if dv.Attempt < 0 || dv.Attempt > broker.MaxAttemptsLimit {
			t.Fatalf("attempt %d out of range", dv.Attempt)
		}
		if err != nil {
			if !errors.Is(err, broker.ErrUndecodable) {
				t.Fatalf("decodeRow error %v does not match ErrUndecodable", err)
			}
			return
		}
		if verr := dv.Message.Validate(); verr != nil {
			t.Fatalf("accepted a row that does not validate: %v", verr)
		}
		if cerr := broker.CheckDecoded(&dv.Message); cerr != nil {
			t.Fatalf("accepted a row that CheckDecoded refuses: %v", cerr)
		}
		// The dead-letter record of a dead row decodes to one with a reason.
		r.deadQueue, r.deadLetter = true, headers
		dv, _ = decodeRow("batch", r)
		if dv.DeadLetter == nil || dv.DeadLetter.Reason == "" {
			t.Fatalf("dead row without a reason: %+v", dv.DeadLetter)
		}
	})
}
