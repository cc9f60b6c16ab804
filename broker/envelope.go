package broker

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// The envelope is a compact binary encoding of a Message, for drivers whose
// broker carries only a body (or too few attributes for the portable
// fields). Its layout is versioned by its first two bytes; decoders reject
// versions they do not know with ErrUndecodable.
//
//	magic 'S','Y' | version 1 | fields as uvarint-length-prefixed strings:
//	ID, Lane, Kind, Tenant, IdempotencyKey, OrderingKey |
//	RunAt, EnqueuedAt as varint unix nanoseconds (0 = zero time) |
//	MaxAttempts uvarint | header count uvarint, then key, value pairs |
//	Body (the rest)

// ErrUndecodable is returned for bytes that are not a valid envelope.
var ErrUndecodable = errors.New("undecodable message")

const envVersion = 1

// EncodeEnvelope encodes m. Headers are written in sorted order so that the
// same message always encodes to the same bytes.
func EncodeEnvelope(m *Message) []byte {
	n := 3 + 6*2 + 2*10 + 5 + len(m.Body) + m.Size() + 2*len(m.Headers)
	b := make([]byte, 0, n)
	b = append(b, 'S', 'Y', envVersion)
	for _, s := range [...]string{m.ID, m.Lane, m.Kind, m.Tenant, m.IdempotencyKey, m.OrderingKey} {
		b = appendString(b, s)
	}
	b = binary.AppendVarint(b, unixNano(m.RunAt))
	b = binary.AppendVarint(b, unixNano(m.EnqueuedAt))
	b = binary.AppendUvarint(b, uint64(m.MaxAttempts))
	b = binary.AppendUvarint(b, uint64(len(m.Headers)))
	if len(m.Headers) > 0 {
		keys := make([]string, 0, len(m.Headers))
		for k := range m.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b = appendString(b, k)
			b = appendString(b, m.Headers[k])
		}
	}
	return append(b, m.Body...)
}

// DecodeEnvelope decodes bytes made by EncodeEnvelope. The message's Body
// aliases b (no copy): do not modify b afterwards. Errors match
// ErrUndecodable; it never panics on any input. A message whose ID or
// MaxAttempts is out of range (CheckDecoded) is undecodable too: it can
// only have been published behind the framework's back.
func DecodeEnvelope(b []byte) (*Message, error) {
	if len(b) < 3 || b[0] != 'S' || b[1] != 'Y' {
		return nil, fmt.Errorf("%w: not a switchyard envelope", ErrUndecodable)
	}
	if b[2] != envVersion {
		return nil, fmt.Errorf("%w: envelope version %d is not supported", ErrUndecodable, b[2])
	}
	r := envReader{b: b[3:]}
	m := &Message{}
	for _, p := range [...]*string{&m.ID, &m.Lane, &m.Kind, &m.Tenant, &m.IdempotencyKey, &m.OrderingKey} {
		*p = r.string()
	}
	m.RunAt = fromUnixNano(r.varint())
	m.EnqueuedAt = fromUnixNano(r.varint())
	ma := r.uvarint()
	if ma > 1<<31 {
		r.err = errors.New("max attempts out of range")
	}
	m.MaxAttempts = int(ma)
	nh := r.uvarint()
	if nh > MaxHeaders*4 {
		r.err = errors.New("header count out of range")
	}
	if r.err == nil && nh > 0 {
		m.Headers = make(map[string]string, nh)
		for i := uint64(0); i < nh && r.err == nil; i++ {
			k := r.string()
			m.Headers[k] = r.string()
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUndecodable, r.err)
	}
	if err := CheckDecoded(m); err != nil {
		return nil, err
	}
	if len(r.b) > 0 {
		m.Body = r.b[:len(r.b):len(r.b)]
	}
	return m, nil
}

type envReader struct {
	b   []byte
	err error
}

func (r *envReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("truncated")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *envReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errors.New("truncated")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *envReader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errors.New("truncated string")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// unixNano is t in Unix nanoseconds, 0 for the zero time. Times beyond
// what int64 nanoseconds hold are clamped rather than wrapped (Publish
// refuses them; see ValidateTime).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return UnixNano(t)
}

var (
	minNanoTime = time.Unix(0, math.MinInt64+1)
	maxNanoTime = time.Unix(0, math.MaxInt64)
)

// UnixNano is t.UnixNano(), clamped to the int64 range instead of wrapping
// for times before 1678 or after 2262. Drivers that store times as Unix
// nanoseconds use it.
func UnixNano(t time.Time) int64 {
	switch {
	case t.Before(minNanoTime):
		return math.MinInt64 + 1
	case t.After(maxNanoTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// EncodeDeadLetter encodes dl as JSON, for drivers that store it in a header
// or column.
func EncodeDeadLetter(dl *DeadLetter) ([]byte, error) {
	return json.Marshal(dl)
}

// DecodeDeadLetter decodes EncodeDeadLetter's output. Errors match
// ErrUndecodable.
func DecodeDeadLetter(b []byte) (*DeadLetter, error) {
	var dl DeadLetter
	if err := json.Unmarshal(b, &dl); err != nil {
		return nil, fmt.Errorf("%w: dead-letter record: %v", ErrUndecodable, err)
	}
	return &dl, nil
}
