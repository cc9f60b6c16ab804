package admin

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestOps_EnqueueKeyReused: a key reused with another request is refused
// with ErrKeyReused, with and without a ledger; the same request (its JSON
// spelt differently) is a duplicate.
func TestOps_EnqueueKeyReused(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(time.Hour).Round(0)
	first := EnqueueRequest{Kind: "mail.send", Args: json.RawMessage(`{"to":"a@example.com","n":[1,2.5]}`), Tenant: "acme",
		IdempotencyKey: "k1", OrderingKey: "o", MaxAttempts: 3, Deadline: deadline, Metadata: map[string]string{"m": "v"}}
	same := first
	same.Args = json.RawMessage(` { "n": [1.0, 25e-1], "to": "a@example.com" } `)
	same.Lane = "interactive" // the kind's lane, named
	changes := map[string]func(r *EnqueueRequest){
		"kind":         func(r *EnqueueRequest) { r.Kind = "pdf.parse" },
		"args":         func(r *EnqueueRequest) { r.Args = json.RawMessage(`{"to":"b@example.com","n":[1,2.5]}`) },
		"lane":         func(r *EnqueueRequest) { r.Lane = "batch" },
		"ordering_key": func(r *EnqueueRequest) { r.OrderingKey = "p" },
		"max_attempts": func(r *EnqueueRequest) { r.MaxAttempts = 4 },
		"deadline":     func(r *EnqueueRequest) { r.Deadline = deadline.Add(time.Second) },
		"metadata":     func(r *EnqueueRequest) { r.Metadata = nil },
	}
	for _, withLedger := range []bool{true, false} {
		e := newEnv(t, withLedger)
		a, err := e.ops.Enqueue(e.ctx, Scope{}, first)
		if err != nil || a.Duplicate {
			t.Fatalf("ledger %v: first: %+v %v", withLedger, a, err)
		}
		if b, err := e.ops.Enqueue(e.ctx, Scope{}, same); err != nil || !b.Duplicate || b.ID != a.ID {
			t.Errorf("ledger %v: the same request again: %+v %v, want the duplicate %s", withLedger, b, err, a.ID)
		}
		for name, change := range changes {
			r := first
			change(&r)
			b, err := e.ops.Enqueue(e.ctx, Scope{}, r)
			if !errors.Is(err, ErrKeyReused) || !errors.Is(err, broker.ErrInvalid) || b != nil {
				t.Errorf("ledger %v: another %s: %+v %v, want ErrKeyReused", withLedger, name, b, err)
			}
		}
		// Another tenant's key space is its own.
		other := first
		other.Tenant, other.Kind = "globex", "pdf.parse"
		if b, err := e.ops.Enqueue(e.ctx, Scope{}, other); err != nil || b.Duplicate {
			t.Errorf("ledger %v: the key in another tenant: %+v %v", withLedger, b, err)
		}
	}
}

// TestOps_EnqueueKeyReusedAcrossOps: with a ledger, the comparison holds
// across processes (two Ops sharing a ledger and a broker).
func TestOps_EnqueueKeyReusedAcrossOps(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	other, err := New(Config{Broker: e.b, Ledger: e.L, Kinds: map[string]KindSpec{"pdf.parse": {}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.ops.Enqueue(e.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", Args: json.RawMessage(`{"a":1}`), IdempotencyKey: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := other.Enqueue(e.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", Args: json.RawMessage(`{"a":1}`), IdempotencyKey: "x"}); err != nil || b.ID != a.ID || !b.Duplicate {
		t.Errorf("same request from another process: %+v %v", b, err)
	}
	if b, err := other.Enqueue(e.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", Args: json.RawMessage(`{"a":2}`), IdempotencyKey: "x"}); !errors.Is(err, ErrKeyReused) {
		t.Errorf("another request from another process: %+v %v, want ErrKeyReused", b, err)
	}
}

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"a":1,"b":[true,null,"x"]}`, ` {"b" : [true, null, "x"], "a": 1.00}`, true},
		{`{"a":1e2}`, `{"a":100}`, true},
		{`{"a":1e99999}`, `{"a":1e99999}`, true},
		{`{"a":1e99999}`, `{"a":1e99998}`, false},
		{`{"a":"1"}`, `{"a":1}`, false},
		{`{"a":{"b":1}}`, `{"a":{"b":1,"c":1}}`, false},
		{`{"é":"\u00e9"}`, `{"\u00e9":"é"}`, true},
	} {
		if got := sameJSON([]byte(c.a), []byte(c.b)); got != c.same {
			t.Errorf("sameJSON(%s, %s) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}
