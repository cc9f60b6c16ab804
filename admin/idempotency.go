package admin

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
)

// ErrKeyReused is returned by Enqueue when an idempotency key already names
// a task enqueued from a different request (another kind, arguments, lane,
// ordering key, maximum of attempts, deadline or metadata). Nothing is
// enqueued; the HTTP API answers 422 Unprocessable Content, as the IETF
// Idempotency-Key draft asks. The error also matches broker.ErrInvalid.
var ErrKeyReused = errors.New("idempotency key already used for a different request")

// keyReusedError is ErrKeyReused for one key, naming the first field that
// differs (never either request's values).
type keyReusedError struct{ key, field string }

func (e *keyReusedError) Error() string {
	return fmt.Sprintf("Idempotency-Key %q was already used for a different request (another %s); send a new key for a new task", e.key, e.field)
}

func (e *keyReusedError) Is(target error) bool {
	return target == ErrKeyReused || target == broker.ErrInvalid
}

func keyReused(key, field string) error { return &keyReusedError{key: key, field: field} }

// request is what makes two ingestion requests the same: the fields an
// enqueued task keeps. run_at and delay are left out: a delay is relative
// to the request's arrival (a retry of the same request comes later), and
// the ledger moves a task's run_at as it retries.
type request struct {
	kind, lane, orderingKey string
	args                    []byte // compacted JSON object
	maxAttempts             int
	deadline                time.Time
	metadata                map[string]string
}

// requestOf is the request r makes once validated (args compacted, lane
// resolved to what the Client will record).
func requestOf(r EnqueueRequest, args []byte, lane string) request {
	if lane == "" {
		// The Client's default (switchyard.EnqueueOpts.Lane).
		lane = lanes.Batch
		if !r.RunAt.IsZero() || r.Delay != "" {
			lane = lanes.Scheduled
		}
	}
	return request{kind: r.Kind, lane: lane, orderingKey: r.OrderingKey, args: args, maxAttempts: r.MaxAttempts,
		deadline: r.Deadline, metadata: r.Metadata}
}

// differs names the first field in which the task t (recorded for the same
// key) differs from q, or "" when t is what q would have enqueued.
// Arguments are compared as JSON values (key order, white space and the
// spelling of numbers do not matter); times to the microsecond (what
// PostgreSQL keeps).
func (q request) differs(t *ledger.Task) string {
	switch {
	case t.Kind != q.kind:
		return "kind"
	case !sameJSON(t.Args, q.args):
		return "args"
	case t.Lane != q.lane:
		return "lane"
	case t.OrderingKey != q.orderingKey:
		return "ordering_key"
	case t.MaxAttempts != q.maxAttempts:
		return "max_attempts"
	case !t.Deadline.Truncate(time.Microsecond).Equal(q.deadline.Truncate(time.Microsecond)):
		return "deadline"
	case !maps.Equal(t.Metadata, q.metadata) && (len(t.Metadata) > 0 || len(q.metadata) > 0):
		return "metadata"
	}
	return ""
}

// fingerprint is a digest of q, for the comparison without a ledger.
func (q request) fingerprint() [sha256.Size]byte {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s;", len(s), s) }
	field(q.kind)
	field(q.lane)
	field(q.orderingKey)
	field(string(canonicalJSON(q.args)))
	field(fmt.Sprint(q.maxAttempts))
	if !q.deadline.IsZero() {
		field(q.deadline.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano))
	} else {
		field("")
	}
	for _, k := range slices.Sorted(maps.Keys(q.metadata)) {
		field(k)
		field(q.metadata[k])
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// sameJSON reports whether a and b hold the same JSON value.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	return bytes.Equal(canonicalJSON(a), canonicalJSON(b))
}

// canonicalJSON re-encodes a JSON value for comparison: object keys
// sorted, no white space, numbers in one spelling (1.0, 1e0 and 1 alike).
// The result is only compared, never parsed. Data that is not JSON is
// returned as is.
func canonicalJSON(data []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return data
	}
	var b bytes.Buffer
	writeCanonical(&b, v)
	return b.Bytes()
}

func writeCanonical(b *bytes.Buffer, v any) {
	switch v := v.(type) {
	case map[string]any:
		b.WriteByte('{')
		for i, k := range slices.Sorted(maps.Keys(v)) {
			if i > 0 {
				b.WriteByte(',')
			}
			s, _ := json.Marshal(k)
			b.Write(s)
			b.WriteByte(':')
			writeCanonical(b, v[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case json.Number:
		b.WriteString(canonicalNumber(string(v)))
	default: // string, bool, nil
		s, _ := json.Marshal(v)
		b.Write(s)
	}
}

// canonicalNumber spells a JSON number as a fraction in lowest terms. A
// number with a long exponent (which big.Rat would expand) stays as is.
func canonicalNumber(s string) string {
	if i := strings.IndexAny(s, "eE"); i >= 0 && len(strings.TrimLeft(s[i+1:], "+-0")) > 3 {
		return s
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return s
	}
	return r.RatString()
}

// keyMemo remembers, without a ledger, the fingerprints of the requests
// this process enqueued under each (tenant, key) for as long as the broker
// deduplicates the key, so that a reused key with another request is
// refused at least when it comes back to the same process. It holds the
// most recent keyMemoSize keys.
type keyMemo struct {
	mu    sync.Mutex
	m     map[string]memoEntry
	order []string // insertion order, oldest first
}

type memoEntry struct {
	fp      [sha256.Size]byte
	expires time.Time
}

const keyMemoSize = 10000

func memoKey(tenant, key string) string { return fmt.Sprintf("%d:%s%s", len(tenant), tenant, key) }

// check returns false when (tenant, key) is remembered, at now, with
// another fingerprint than fp.
func (k *keyMemo) check(tenant, key string, fp [sha256.Size]byte, now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[memoKey(tenant, key)]
	return !ok || e.fp == fp || now.After(e.expires)
}

// record remembers fp for (tenant, key) until expires.
func (k *keyMemo) record(tenant, key string, fp [sha256.Size]byte, expires time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]memoEntry{}
	}
	mk := memoKey(tenant, key)
	if _, ok := k.m[mk]; !ok {
		k.order = append(k.order, mk)
		if len(k.order) > keyMemoSize {
			delete(k.m, k.order[0])
			k.order = slices.Delete(k.order, 0, 1)
		}
	}
	k.m[mk] = memoEntry{fp: fp, expires: expires}
}
