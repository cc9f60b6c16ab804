package broker_test

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// FuzzDecodeDeadLetter: no input makes the decoder panic, every refusal is
// ErrUndecodable, and a record it accepts re-encodes and decodes to the
// same record.
func FuzzDecodeDeadLetter(f *testing.F) {
	full, _ := broker.EncodeDeadLetter(&broker.DeadLetter{Reason: broker.ReasonMaxAttempts, Error: "boom",
		At: time.Unix(1700000000, 5).UTC(), Attempts: []broker.AttemptRecord{{Attempt: 1, Start: time.Unix(1, 0).UTC(),
			Duration: time.Second, Class: "transient", Error: "e", Worker: "w"}}})
	f.Add(full)
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"Reason":"undecodable","At":"0001-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"At":"9999-12-31T23:59:59.999999999+14:00","Attempts":[{"Attempt":-1,"Duration":-9223372036854775808}]}`))
	f.Add([]byte(`{"Reason":`))
	f.Add([]byte("\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		dl, err := broker.DecodeDeadLetter(b)
		if err != nil {
			if !errors.Is(err, broker.ErrUndecodable) {
				t.Fatalf("error %v is not ErrUndecodable", err)
			}
			return
		}
		enc, err := broker.EncodeDeadLetter(dl)
		if err != nil {
			t.Fatalf("a decoded record does not re-encode: %+v: %v", dl, err)
		}
		again, err := broker.DecodeDeadLetter(enc)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %s: %v", enc, err)
		}
		if enc2, _ := broker.EncodeDeadLetter(again); !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed the record:\n%s\n%s", enc, enc2)
		}
	})
}

// FuzzParseFair: no panic, refusals are ErrInvalid, and an accepted value
// names valid lanes with positive shard counts, and parses the same when
// written back.
func FuzzParseFair(f *testing.F) {
	for _, s := range []string{"batch", "batch,bulk:16", "batch:8, interactive:2", "a:b:3", "", ",", "batch,batch",
		"batch:0", "batch:-1", "batch:99999999999999999999", "x:1:2", "bad lane", ":3", "batch:fair-3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := broker.ParseFair(s)
		if err != nil {
			if !errors.Is(err, broker.ErrInvalid) {
				t.Fatalf("ParseFair(%q) = %v, not ErrInvalid", s, err)
			}
			return
		}
		var parts []string
		for lane, n := range m {
			if n <= 0 {
				t.Fatalf("ParseFair(%q): lane %q has %d shards", s, lane, n)
			}
			if err := broker.ValidateName("lane", lane); err != nil {
				t.Fatalf("ParseFair(%q): lane %q: %v", s, lane, err)
			}
			parts = append(parts, lane+":"+itoa(n))
		}
		again, err := broker.ParseFair(strings.Join(parts, ","))
		if err != nil || len(again) != len(m) {
			t.Fatalf("ParseFair(%q) = %v; written back: %v, %v", s, m, again, err)
		}
		for lane, n := range m {
			if again[lane] != n {
				t.Fatalf("ParseFair(%q) = %v; written back: %v", s, m, again)
			}
		}
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// FuzzRedact: no panic, and no password or secret parameter survives, in
// the URL or in a broker URL nested in a parameter.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		"rabbitmq://app:s3cret@mq:5672/vh?namespace=n&token=abc&access_key=AKIA",
		"router://?lane.batch=" + url.QueryEscape("rabbitmq://u:hunter2@mq/") + "&default=" + url.QueryEscape("mem://x"),
		"sqs://?region=eu&secret_key=zzz&endpoint=http://127.0.0.1:9324",
		"nats://tok@h:4222?password=p;x=1",
		"redis://:pw@h:6379/0?password=a%zz&b=1",
		"redis://h?Password=p&PASSWORD=q&pass=1&pass=2",
		"x://h?v=" + url.QueryEscape("y://u:p@h?token="+url.QueryEscape("z://u:deep@h")),
		"mailto:a@b?token=x",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		checkRedacted(t, s, broker.Redact(u), 0)
	})
}

// checkRedacted fails unless out (Redact's answer for in) holds no
// password and only masked secret parameters, recursively.
func checkRedacted(t *testing.T, in, out string, depth int) {
	t.Helper()
	ru, err := url.Parse(out)
	if err != nil {
		// url.URL.String does not always give a URL that parses again
		// ("%2F%2F 0" gives "//%200"); then at least no query and no
		// unmasked user information may be left.
		if strings.Contains(out, "?") || strings.Contains(out, "@") && !strings.Contains(out, ":xxxxx@") {
			t.Fatalf("Redact(%q) = %q, which does not parse (%v) and may hide a secret", in, out, err)
		}
		return
	}
	if p, ok := ru.User.Password(); ok && p != "xxxxx" {
		t.Fatalf("Redact(%q) = %q: the password is left", in, out)
	}
	q, err := url.ParseQuery(ru.RawQuery)
	if err != nil {
		t.Fatalf("Redact(%q) = %q: a query that does not parse may hide a secret: %v", in, out, err)
	}
	for k, vs := range q {
		lk := strings.ToLower(k)
		secret := false
		for _, w := range []string{"pass", "secret", "token", "credential", "access_key", "accesskey", "auth"} {
			secret = secret || strings.Contains(lk, w)
		}
		for _, v := range vs {
			switch {
			case secret && v != "xxxxx":
				t.Fatalf("Redact(%q) = %q: parameter %q is left", in, out, k)
			case !secret && strings.Contains(v, "://") && depth < 8:
				checkRedacted(t, in, v, depth+1)
			}
		}
	}
}

// FuzzRouterURL: no router:// URL makes the opener panic, and every
// refusal is ErrInvalid. Routed URLs are limited to mem:// (and router://,
// refused), so the fuzzer creates no file and dials nothing.
func FuzzRouterURL(f *testing.F) {
	esc := url.QueryEscape
	for _, s := range []string{
		"router://?default=" + esc("mem://fz1"),
		"router://?default=" + esc("mem://fz1") + "&lane.batch=" + esc("mem://fz2") + "&from.batch=" + esc("mem://fz3"),
		"router://?lane.x=" + esc("mem://fz1") + "&bogus=1",
		"router://?from.batch=" + esc("mem://fz1"),
		"router://?default=" + esc("mem://fz1") + "&from.default=" + esc("mem://fz1"),
		"router://?default=" + esc("router://?default="+esc("mem://fz1")),
		"router://host?default=" + esc("mem://fz1"),
		"router://?lane.bad%20lane=" + esc("mem://fz1"),
		"router://?lane.=" + esc("mem://fz1"),
		"router://?default=" + esc("mem://fz1?namespace=a&poll=-1s"),
		"router://?default=%zz",
		"router://?default=a;b",
		"router://",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil || !strings.EqualFold(u.Scheme, "router") {
			return
		}
		q, _ := url.ParseQuery(u.RawQuery)
		for _, vs := range q {
			for _, v := range vs {
				scheme, _, _ := strings.Cut(v, ":")
				if scheme = strings.ToLower(scheme); scheme != "mem" && scheme != "router" {
					return // another broker: might create a file or dial
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := broker.OpenDriver(ctx, s)
		if err != nil {
			if !errors.Is(err, broker.ErrInvalid) {
				t.Fatalf("OpenDriver(%q) = %v, not ErrInvalid", s, err)
			}
			return
		}
		if d == nil {
			t.Fatalf("OpenDriver(%q) = nil, nil", s)
		}
		d.Close()
	})
}
