package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	empty, err := broker.DecodeEnvelope(broker.EncodeEnvelope(&broker.Message{Lane: "l", Kind: "k"}))
	if err != nil || !empty.RunAt.IsZero() || empty.Body != nil || empty.Headers != nil {
		t.Fatalf("empty message round trip = %+v, %v", empty, err)
	}
	for _, b := range [][]byte{nil, []byte("SY"), []byte("XX\x01"), []byte("SY\x09rest"), enc[:len(enc)/2]} {
		if _, err := broker.DecodeEnvelope(b); err != nil && !errors.Is(err, broker.ErrUndecodable) {
			t.Errorf("DecodeEnvelope(%q) = %v, want ErrUndecodable", b, err)
		}
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
