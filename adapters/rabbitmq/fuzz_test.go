package rabbitmq

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

// FuzzParseURL: no rabbitmq:// URL makes the parser panic; refusals are
// broker.ErrInvalid and never quote the password, nor does the redacted
// form. URLs naming files (ca_file, cert_file, key_file) are left out: the
// parser reads them.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"rabbitmq://", "rabbitmq://app:s3cret@mq:5672/vh?namespace=n", "amqps://u:p@h/%2F?server_name=x",
		"amqps://h?tls=false", "rabbitmq://h?prefetch=0&confirm_window=-1&delivery_limit=0", "rabbitmq://h?heartbeat=soon",
		"rabbitmq://u:hunter22@h/?namespace=bad%20ns", "rabbitmq://h?tls_insecure_skip_verify=true", "rabbitmq:opaque",
		"rabbitmq://[::1]:5672", "rabbitmq://h?max_message_size=999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		q, _ := url.ParseQuery(u.RawQuery)
		for k := range q {
			if strings.HasSuffix(strings.ToLower(k), "_file") {
				return
			}
		}
		// A password no error text can hold by chance.
		const p = "Pw-9f2Q-7xK"
		_, check := u.User.Password()
		if check {
			u.User = url.UserPassword(u.User.Username(), p)
		}
		c, err := parseURL(u)
		if err != nil {
			if !errors.Is(err, broker.ErrInvalid) {
				t.Fatalf("parseURL(%q) = %v, not ErrInvalid", s, err)
			}
			if check && strings.Contains(err.Error(), p) {
				t.Fatalf("parseURL(%q) = %v: the error quotes the password", s, err)
			}
			return
		}
		if check && (strings.Contains(c.redacted, p) || strings.Contains(c.dialURL(), p)) {
			t.Fatalf("parseURL(%q): the password is in %q or %q", s, c.redacted, c.dialURL())
		}
	})
}

// headerValue maps a fuzzed (type, number, text) to an AMQP header value of
// one of the types a client may send.
func headerValue(typ byte, n int64, s string) any {
	switch typ % 12 {
	case 0:
		return nil
	case 1:
		return int8(n)
	case 2:
		return int16(n)
	case 3:
		return int32(n)
	case 4:
		return n
	case 5:
		return uint8(n)
	case 6:
		return uint16(n)
	case 7:
		return uint32(n)
	case 8:
		return uint64(n)
	case 9:
		return s
	case 10:
		return []byte(s)
	}
	return float64(n)
}

// FuzzHeaders: the headers of a delivery (set by any AMQP client, or by
// RabbitMQ itself) never make the mapping panic, give an attempt number of
// at least 1 for a live delivery and not below 0 for a dead letter, and a
// dead letter always has a reason.
func FuzzHeaders(f *testing.F) {
	dl, _ := broker.EncodeDeadLetter(&broker.DeadLetter{Reason: broker.ReasonMaxAttempts, Error: "e", At: time.Unix(1, 0).UTC()})
	f.Add(byte(4), int64(2), "", byte(4), int64(3), byte(9), string(dl), byte(4), int64(4), int64(1))
	f.Add(byte(9), int64(0), "9223372036854775807", byte(8), int64(-1), byte(10), `{}`, byte(9), int64(0), int64(0))
	f.Add(byte(4), int64(-9223372036854775808), "", byte(4), int64(9223372036854775807), byte(9), `{"Reason":""}`, byte(0), int64(0), int64(-1))
	f.Add(byte(11), int64(0), "x", byte(0), int64(0), byte(0), "", byte(1), int64(-128), int64(1700000000))
	f.Fuzz(func(t *testing.T, pt byte, pn int64, ps string, ct byte, cn int64, dt byte, ds string, at byte, an int64, death int64) {
		h := amqp.Table{}
		if v := headerValue(pt, pn, ps); v != nil {
			h[hdrPrior] = v
		}
		if v := headerValue(ct, cn, ps); v != nil {
			h[hdrDeliveryCount] = v
		}
		if v := headerValue(dt, 0, ds); v != nil {
			h[hdrDeadLetter] = v
		}
		if v := headerValue(at, an, ps); v != nil {
			h[hdrAttempt] = v
		}
		if death != 0 {
			h["x-death"] = []any{amqp.Table{"reason": "delivery_limit", "time": time.Unix(death, 0)}, "junk"}
		}
		if a := attemptOf(h); a < 1 {
			t.Fatalf("attemptOf(%v) = %d", h, a)
		}
		d, a := deadLetterOf(amqp.Delivery{Headers: h}, DefaultDeliveryLimit)
		if d == nil || d.Reason == "" || a < 0 {
			t.Fatalf("deadLetterOf(%v) = %+v, %d", h, d, a)
		}
	})
}
