package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

func TestError_Classification(t *testing.T) {
	t.Parallel()
	cause := errors.New("connection reset")
	cases := []struct {
		name  string
		err   error
		class broker.Class
		is    []error
	}{
		{"wrapped transient", broker.Wrap("publish", broker.Transient, cause), broker.Transient, []error{broker.ErrTransient, cause}},
		{"permanent kind", broker.KindError("publish", broker.Permanent, broker.ErrUnsupported, "no delays"), broker.Permanent, []error{broker.ErrPermanent, broker.ErrUnsupported}},
		{"unknown outcome", broker.Wrap("publish", broker.UnknownOutcome, cause), broker.UnknownOutcome, []error{broker.ErrUnknownOutcome}},
		{"invalid", broker.Invalidf("bad %s", "thing"), broker.Permanent, []error{broker.ErrInvalid, broker.ErrPermanent}},
		{"lease lost", broker.LeaseLostError("ack", "m1"), broker.Permanent, []error{broker.ErrLeaseLost}},
		{"closed", broker.ClosedError("receive"), broker.Permanent, []error{broker.ErrClosed}},
		{"too large", &broker.TooLargeError{Size: 10, Max: 5}, broker.Permanent, []error{broker.ErrTooLarge}},
		{"context", broker.Wrap("receive", broker.Transient, context.DeadlineExceeded), broker.Transient, []error{context.DeadlineExceeded}},
		{"unclassified", cause, broker.Transient, nil},
		{"wrapped twice keeps class", broker.Wrap("outer", broker.Transient, broker.Invalidf("x")), broker.Permanent, []error{broker.ErrInvalid}},
		{"fmt-wrapped", fmt.Errorf("ctx: %w", broker.ClosedError("ack")), broker.Permanent, []error{broker.ErrClosed}},
	}
	for _, c := range cases {
		if got := broker.ClassOf(c.err); got != c.class {
			t.Errorf("%s: ClassOf = %s, want %s", c.name, got, c.class)
		}
		for _, target := range c.is {
			if !errors.Is(c.err, target) {
				t.Errorf("%s: errors.Is(%v, %v) = false", c.name, c.err, target)
			}
		}
	}
	if broker.Wrap("x", broker.Transient, nil) != nil {
		t.Error("Wrap(nil) != nil")
	}
	if !broker.IsContext(broker.Wrap("r", broker.Transient, context.Canceled)) {
		t.Error("a wrapped context error is not recognised")
	}
}

func TestMessage_Validate(t *testing.T) {
	t.Parallel()
	ok := broker.Message{Lane: "interactive", Kind: "email.send"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid message: %v", err)
	}
	for _, m := range []broker.Message{
		{Lane: "l", Kind: "k", MaxAttempts: broker.MaxAttemptsLimit},
		{Lane: "l", Kind: "k", RunAt: time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Lane: "l", Kind: "k", RunAt: time.Date(2261, 12, 31, 23, 59, 59, 0, time.UTC)},
	} {
		if err := m.Validate(); err != nil {
			t.Errorf("valid message %+v: %v", m, err)
		}
	}
	bad := map[string]broker.Message{
		"no lane":          {Kind: "k"},
		"no kind":          {Lane: "l"},
		"lane with space":  {Lane: "my lane", Kind: "k"},
		"lane punctuation": {Lane: "-lane", Kind: "k"},
		"long kind":        {Lane: "l", Kind: strings.Repeat("k", 129)},
		"control in key":   {Lane: "l", Kind: "k", IdempotencyKey: "a\x00b"},
		"long tenant":      {Lane: "l", Kind: "k", Tenant: strings.Repeat("t", 257)},
		"negative max":     {Lane: "l", Kind: "k", MaxAttempts: -1},
		"empty header":     {Lane: "l", Kind: "k", Headers: map[string]string{"": "v"}},
		"huge header":      {Lane: "l", Kind: "k", Headers: map[string]string{"h": strings.Repeat("v", 4097)}},
		"huge max":         {Lane: "l", Kind: "k", MaxAttempts: 3000000000},
		"max over limit":   {Lane: "l", Kind: "k", MaxAttempts: broker.MaxAttemptsLimit + 1},
		"run-at year 1":    {Lane: "l", Kind: "k", RunAt: time.Date(1, 6, 1, 0, 0, 0, 0, time.UTC)},
		"run-at 1969":      {Lane: "l", Kind: "k", RunAt: time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)},
		"run-at 2263":      {Lane: "l", Kind: "k", RunAt: time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)},
		"run-at 2262":      {Lane: "l", Kind: "k", RunAt: time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)},
		"run-at 9999":      {Lane: "l", Kind: "k", RunAt: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)},
		"id control char":  {Lane: "l", Kind: "k", ID: "a\nb"},
		"id too long":      {Lane: "l", Kind: "k", ID: strings.Repeat("i", 257)},
	}
	for name, m := range bad {
		if err := m.Validate(); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
}

func TestEnvelope_RoundTrip(t *testing.T) {
	t.Parallel()
	m := &broker.Message{ID: "01", Lane: "batch", Kind: "doc.embed", Body: []byte{0, 1, 2, 255}, Tenant: "acme",
		IdempotencyKey: "k", OrderingKey: "o", RunAt: time.Unix(0, 1700000000123456789).UTC(), EnqueuedAt: time.Unix(0, 1700000000000000001).UTC(),
		MaxAttempts: 9, Headers: map[string]string{"b": "2", "a": "1"}}
	enc := broker.EncodeEnvelope(m)
	if !bytes.Equal(enc, broker.EncodeEnvelope(m)) {
		t.Fatal("encoding is not deterministic")
	}
	got, err := broker.DecodeEnvelope(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != m.ID || got.Lane != m.Lane || got.Kind != m.Kind || !bytes.Equal(got.Body, m.Body) || got.Tenant != m.Tenant ||
		got.IdempotencyKey != m.IdempotencyKey || got.OrderingKey != m.OrderingKey || !got.RunAt.Equal(m.RunAt) ||
		!got.EnqueuedAt.Equal(m.EnqueuedAt) || got.MaxAttempts != 9 || got.Headers["a"] != "1" || got.Headers["b"] != "2" {
		t.Fatalf("round trip = %+v, want %+v", got, m)
	}
	empty, err := broker.DecodeEnvelope(broker.EncodeEnvelope(&broker.Message{ID: "x", Lane: "l", Kind: "k"}))
	if err != nil || !empty.RunAt.IsZero() || empty.Body != nil || empty.Headers != nil {
		t.Fatalf("empty message round trip = %+v, %v", empty, err)
	}
	for _, b := range [][]byte{nil, []byte("SY"), []byte("XX\x01"), []byte("SY\x09rest"), enc[:len(enc)/2]} {
		if _, err := broker.DecodeEnvelope(b); err != nil && !errors.Is(err, broker.ErrUndecodable) {
			t.Errorf("DecodeEnvelope(%q) = %v, want ErrUndecodable", b, err)
		}
	}
}

// TestEnvelope_BadIDIsUndecodable: a message published behind the
// framework's back with an empty, overlong or control-character ID, or an
// attempt limit out of range, does not decode, so drivers dead-letter it
// instead of handing it to the runtime (where the ledger refuses it and it
// would loop).
func TestEnvelope_BadIDIsUndecodable(t *testing.T) {
	t.Parallel()
	for name, m := range map[string]*broker.Message{
		"empty id":    {Lane: "l", Kind: "k"},
		"long id":     {ID: strings.Repeat("i", broker.MaxKeyLen+1), Lane: "l", Kind: "k"},
		"control id":  {ID: "a\x00b", Lane: "l", Kind: "k"},
		"del id":      {ID: "a\x7fb", Lane: "l", Kind: "k"},
		"huge max":    {ID: "x", Lane: "l", Kind: "k", MaxAttempts: broker.MaxAttemptsLimit + 1},
		"wrapped max": {ID: "x", Lane: "l", Kind: "k", MaxAttempts: 1 << 31},
	} {
		_, err := broker.DecodeEnvelope(broker.EncodeEnvelope(m))
		if !errors.Is(err, broker.ErrUndecodable) {
			t.Errorf("%s: DecodeEnvelope = %v, want ErrUndecodable", name, err)
		}
	}
	if _, err := broker.DecodeEnvelope(broker.EncodeEnvelope(&broker.Message{ID: strings.Repeat("i", broker.MaxKeyLen), Lane: "l", Kind: "k"})); err != nil {
		t.Errorf("a %d-byte id: %v", broker.MaxKeyLen, err)
	}
}

// TestTimes_NeverWrap: times outside int64 nanoseconds are refused at
// publish, and delays that overflow are refused, not wrapped.
func TestTimes_NeverWrap(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range []time.Duration{2562047 * time.Hour, time.Duration(math.MaxInt64), 250 * 365 * 24 * time.Hour, -time.Second} {
		if at, err := broker.After("delay", now, d); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("After(%v) = %v, %v; want ErrInvalid", d, at, err)
		}
	}
	if at, err := broker.After("delay", now, 90*time.Second); err != nil || !at.Equal(now.Add(90*time.Second)) {
		t.Errorf("After(90s) = %v, %v", at, err)
	}
	year1 := time.Date(1, 6, 1, 0, 0, 0, 0, time.UTC)
	y9999 := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := broker.UnixNano(year1); got != math.MinInt64+1 {
		t.Errorf("UnixNano(year 1) = %d, want clamped", got)
	}
	if got := broker.UnixNano(y9999); got != math.MaxInt64 {
		t.Errorf("UnixNano(9999) = %d, want clamped", got)
	}
	// An envelope never turns a far time into an early one.
	m, err := broker.DecodeEnvelope(broker.EncodeEnvelope(&broker.Message{ID: "x", Lane: "l", Kind: "k", RunAt: y9999}))
	if err != nil || m.RunAt.Year() < 2262 {
		t.Errorf("run-at 9999 decoded as %v (%v)", m.RunAt, err)
	}
}

// FuzzDecodeEnvelope: no input makes the decoder panic, and every input it
// accepts re-encodes to something that decodes to the same message.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(broker.EncodeEnvelope(&broker.Message{ID: "x", Lane: "l", Kind: "k", Body: []byte("b"), Headers: map[string]string{"h": "v"}}))
	f.Add([]byte("SY\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := broker.DecodeEnvelope(b)
		if err != nil {
			if !errors.Is(err, broker.ErrUndecodable) {
				t.Fatalf("error %v is not ErrUndecodable", err)
			}
			return
		}
		again, err := broker.DecodeEnvelope(broker.EncodeEnvelope(m))
		if err != nil || again.ID != m.ID || again.Kind != m.Kind || !bytes.Equal(again.Body, m.Body) || len(again.Headers) != len(m.Headers) {
			t.Fatalf("re-encoding changed the message: %+v vs %+v (%v)", again, m, err)
		}
	})
}

func TestQuery(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("x://h/p?namespace=n1&lease=5s&batch=10&fifo=true&bogus=1&bad_int=x")
	q := broker.NewQuery(u)
	if q.String("namespace", "d") != "n1" || q.Duration("lease", 0) != 5*time.Second || q.Int("batch", 0) != 10 || !q.Bool("fifo", false) {
		t.Fatal("typed getters returned wrong values")
	}
	if q.String("missing", "def") != "def" {
		t.Fatal("default not used")
	}
	_ = q.Int("bad_int", 3)
	err := q.Finish()
	if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "bogus") || !strings.Contains(err.Error(), "bad_int") {
		t.Fatalf("Finish = %v, want ErrInvalid naming bogus and bad_int", err)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("rabbitmq://app:s3cret@mq:5672/vh?namespace=n&token=abc&access_key=AKIA")
	s := broker.Redact(u)
	for _, secret := range []string{"s3cret", "abc", "AKIA"} {
		if strings.Contains(s, secret) {
			t.Errorf("Redact left %q in %s", secret, s)
		}
	}
	if !strings.Contains(s, "app") || !strings.Contains(s, "namespace=n") {
		t.Errorf("Redact removed too much: %s", s)
	}
	nested, _ := url.Parse("router://?lane.batch=" + url.QueryEscape("rabbitmq://u:hunter2@mq/") + "&default=" + url.QueryEscape("mem://x"))
	if r := broker.Redact(nested); strings.Contains(r, "hunter2") || !strings.Contains(r, "mem") {
		t.Errorf("Redact of nested URLs = %s", r)
	}
}

func TestOpen_UnknownScheme(t *testing.T) {
	t.Parallel()
	_, err := broker.Open(context.Background(), "kafka://user:pw@host/x", nil)
	if !errors.Is(err, broker.ErrInvalid) || strings.Contains(err.Error(), "pw") {
		t.Fatalf("Open(unknown scheme) = %v, want ErrInvalid without the password", err)
	}
	_, err = broker.Open(context.Background(), "://nope", nil)
	if !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("Open(unparsable) = %v, want ErrInvalid", err)
	}
}

func TestMemorySequencer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := broker.NewMemorySequencer()
	a1, _ := s.Assign(ctx, "l", "k")
	a2, _ := s.Assign(ctx, "l", "k")
	a3, _ := s.Assign(ctx, "l", "k")
	until := time.Now().Add(time.Minute)
	steps := []struct {
		op   string
		seq  int64
		want broker.Grant
	}{
		{"acquire", a2, broker.GrantWait}, // 1 has not run
		{"acquire", a1, broker.GrantRun},
		{"acquire", a1, broker.GrantRun}, // a redelivery of the running one
		{"release-undone", a1, 0},        // nacked: 1 must run again first
		{"acquire", a2, broker.GrantWait},
		{"acquire", a1, broker.GrantRun},
		{"release-done", a1, 0},
		{"acquire", a3, broker.GrantWait},
		{"acquire", a2, broker.GrantRun},
		{"release-done", a2, 0},
		{"acquire", a1, broker.GrantLate}, // a replay of a finished one
		{"acquire", a3, broker.GrantRun},
	}
	for i, st := range steps {
		switch st.op {
		case "acquire":
			g, err := s.Acquire(ctx, "l", "k", st.seq, until)
			if err != nil || g != st.want {
				t.Fatalf("step %d: Acquire(%d) = %v, %v; want %v", i, st.seq, g, err, st.want)
			}
		case "release-done", "release-undone":
			if err := s.Release(ctx, "l", "k", st.seq, st.op == "release-done"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// An expired hold lets the same sequence number be taken over, and a
	// sequence that was never published (released done) does not block.
	b1, _ := s.Assign(ctx, "l", "k2")
	b2, _ := s.Assign(ctx, "l", "k2")
	if g, _ := s.Acquire(ctx, "l", "k2", b1, time.Now().Add(-time.Second)); g != broker.GrantRun {
		t.Fatal("first acquire")
	}
	if g, _ := s.Acquire(ctx, "l", "k2", b1, until); g != broker.GrantRun {
		t.Fatal("takeover after expiry")
	}
	_ = s.Release(ctx, "l", "k2", b1, true)
	if g, _ := s.Acquire(ctx, "l", "k2", b2, until); g != broker.GrantRun {
		t.Fatal("next after done")
	}
}
