package redisstreams

import (
	"bytes"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
)

// FuzzParseURL: no redis-streams:// URL makes the parser panic; refusals
// are broker.ErrInvalid and never quote the password.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redis-streams://", "redis-streams://u:s3cret@h:6379/2?namespace=ns&max_batch=5",
		"redis-streams://h?tls=true&tls_insecure_skip_verify=true", "redis-streams://h:/x", "redis-streams:opaque",
		"redis-streams://h?poll=0s&max_len=-3", "redis-streams://[::1]:6379/0", "redis-streams://h?prefix=a:b&consumer=c.d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		const pw = "Pw-9f2Q-7xK"
		if u.User != nil {
			u.User = url.UserPassword(u.User.Username(), pw)
		}
		c, err := ParseURL(u)
		if err != nil {
			if !errors.Is(err, broker.ErrInvalid) {
				t.Fatalf("ParseURL(%q) = %v, not ErrInvalid", s, err)
			}
			if strings.Contains(err.Error(), pw) {
				t.Fatalf("ParseURL(%q) = %v quotes the password", s, err)
			}
			return
		}
		if c.MaxBatch < 1 || c.MaxBatch > MaxBatchLimit || c.MaxMessageSize < 1 || c.MaxMessageSize > MaxMessageSizeLimit ||
			strings.ContainsAny(c.Namespace+c.Prefix, "{}") {
			t.Fatalf("ParseURL(%q) accepted %+v", s, c)
		}
	})
}

// fuzzFields splits b into a flat field/value list as a script reply
// carries it.
func fuzzFields(b []byte) []any {
	var out []any
	for _, p := range bytes.Split(b, []byte{0}) {
		out = append(out, string(p))
	}
	return out
}

// FuzzDecodeEntry: whatever a stream entry holds — written by Switchyard,
// by another producer, or corrupted — decoding it never panics: a live
// entry is an envelope or undecodable, a dead entry always has a record
// with a reason and a valid ID, and a malformed script reply is an error.
func FuzzDecodeEntry(f *testing.F) {
	env := broker.EncodeEnvelope(&broker.Message{ID: "m1", Lane: "batch", Kind: "k", Body: []byte("body")})
	rec, _ := broker.EncodeDeadLetter(&broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "x"})
	f.Add(append(append([]byte("e\x00"), env...), []byte("\x00dl\x00"+string(rec)+"\x00i\x00m1\x00a\x003")...))
	f.Add([]byte("e\x00not an envelope"))
	f.Add([]byte("foo\x00bar\x00e"))
	f.Add([]byte("a\x00-7\x00dl\x00{\"Reason\":\"\"}\x00i\x00bad\nid"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		fields := fieldMap(fuzzFields(b))
		if m, err := broker.DecodeEnvelope([]byte(fields[fieldEnvelope])); err == nil {
			if broker.ValidateID(m.ID) != nil {
				t.Fatalf("decoded an envelope with a bad ID %q", m.ID)
			}
		}
		dv := deadDelivery("batch", "1700000000000-1", fields)
		if dv.DeadLetter == nil || dv.DeadLetter.Reason == "" {
			t.Fatalf("dead entry %q decoded without a reason", b)
		}
		if broker.ValidateID(dv.ID) != nil {
			t.Fatalf("dead entry %q decoded with a bad ID %q", b, dv.ID)
		}
		if dv.Attempt < 0 {
			t.Fatalf("negative attempt %d", dv.Attempt)
		}
		// A receive reply built from the same bytes, well-formed or not.
		reply := []any{int64(1), int64(0), "0-0", []any{[]any{"1-1", fuzzFields(b), int64(len(b)), int64(0)}, fuzzFields(b)}}
		if r, err := parseLeased(reply); err == nil && len(r.entries) != 2 {
			t.Fatalf("parsed %d entries from a reply of 2", len(r.entries))
		}
		_, _ = parseLeased(fuzzFields(b))
	})
}
