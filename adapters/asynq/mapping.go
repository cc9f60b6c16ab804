package asynq

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/broker"
)

// Task headers that carry the portable fields asynq has no place for. They
// live in the asynq task's Headers next to the message's own headers, so
// asynq's tools show them; the adapter strips them when it decodes. Their
// prefix is reserved: a message header with it is refused at publish.
const (
	HeaderPrefix         = "switchyard-msg-"
	HeaderTenant         = HeaderPrefix + "tenant"
	HeaderIdempotencyKey = HeaderPrefix + "idempotency-key"
	HeaderOrderingKey    = HeaderPrefix + "ordering-key"
	HeaderRunAt          = HeaderPrefix + "run-at"
	HeaderEnqueuedAt     = HeaderPrefix + "enqueued-at"
	// HeaderMaxAttemptsUnset marks a task published with MaxAttempts 0:
	// its asynq retry count is the default, and deliveries report 0 so the
	// consumer's retry policy decides.
	HeaderMaxAttemptsUnset = HeaderPrefix + "max-attempts-unset"
)

// defaultMaxAttempts is asynq's retry count (plus one) for a message
// published with MaxAttempts 0: a safety net against messages that crash
// every consumer, like broker.Options.DefaultMaxAttempts.
const defaultMaxAttempts = 25

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// toTask maps a portable message onto an asynq task message for queue.
func toTask(m *broker.Message, queue string) (*taskMessage, error) {
	for _, kv := range [...][2]string{{"id", m.ID}, {"tenant", m.Tenant}, {"idempotency key", m.IdempotencyKey}, {"ordering key", m.OrderingKey}} {
		if !utf8.ValidString(kv[1]) {
			return nil, broker.Invalidf("%s is not valid UTF-8 (asynq stores it as a protobuf string)", kv[0])
		}
	}
	if m.ID == "" {
		return nil, broker.Invalidf("message has no ID")
	}
	ma := m.MaxAttempts
	unset := ma <= 0
	if unset {
		// asynq needs a retry count; remember that the publisher set none,
		// so the consumer's retry policy decides rather than this default.
		ma = defaultMaxAttempts
	}
	t := &taskMessage{Type: m.Kind, Payload: m.Body, ID: m.ID, Queue: queue, Retry: int32(ma - 1)}
	n := len(m.Headers)
	if n > 0 || unset || m.Tenant != "" || m.IdempotencyKey != "" || m.OrderingKey != "" || !m.RunAt.IsZero() || !m.EnqueuedAt.IsZero() {
		t.Headers = make(map[string]string, n+6)
	}
	if unset {
		t.Headers[HeaderMaxAttemptsUnset] = "1"
	}
	for k, v := range m.Headers {
		if strings.HasPrefix(k, HeaderPrefix) {
			return nil, broker.Invalidf("header %q: the prefix %s is reserved by the asynq adapter", k, HeaderPrefix)
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, broker.Invalidf("header %q is not valid UTF-8 (asynq stores headers as protobuf strings)", k)
		}
		t.Headers[k] = v
	}
	setIf := func(k, v string) {
		if v != "" {
			t.Headers[k] = v
		}
	}
	setIf(HeaderTenant, m.Tenant)
	setIf(HeaderIdempotencyKey, m.IdempotencyKey)
	setIf(HeaderOrderingKey, m.OrderingKey)
	if !m.RunAt.IsZero() {
		t.Headers[HeaderRunAt] = m.RunAt.UTC().Format(time.RFC3339Nano)
	}
	if !m.EnqueuedAt.IsZero() {
		t.Headers[HeaderEnqueuedAt] = m.EnqueuedAt.UTC().Format(time.RFC3339Nano)
	}
	return t, nil
}

// fromTask maps an asynq task message (ours or a plain asynq client's) back
// to a portable message of lane. id is the ID the task is stored under; a
// task message that disagrees with it is corrupt.
func fromTask(t *taskMessage, id, lane string) (*broker.Message, error) {
	if t.Type == "" {
		return nil, fmt.Errorf("%w: task type is empty", broker.ErrUndecodable)
	}
	if t.ID != id {
		return nil, fmt.Errorf("%w: task message ID does not match the task key", broker.ErrUndecodable)
	}
	m := &broker.Message{ID: t.ID, Lane: lane, Kind: t.Type, Body: t.Payload, MaxAttempts: int(t.Retry) + 1}
	if m.MaxAttempts < 1 {
		m.MaxAttempts = 1
	}
	for k, v := range t.Headers {
		if !strings.HasPrefix(k, HeaderPrefix) {
			if m.Headers == nil {
				m.Headers = make(map[string]string, len(t.Headers))
			}
			m.Headers[k] = v
			continue
		}
		var err error
		switch k {
		case HeaderTenant:
			m.Tenant = v
		case HeaderIdempotencyKey:
			m.IdempotencyKey = v
		case HeaderOrderingKey:
			m.OrderingKey = v
		case HeaderRunAt:
			m.RunAt, err = time.Parse(time.RFC3339Nano, v)
		case HeaderEnqueuedAt:
			m.EnqueuedAt, err = time.Parse(time.RFC3339Nano, v)
		case HeaderMaxAttemptsUnset:
			m.MaxAttempts = 0
		default:
			// A field of a newer adapter version: not ours to interpret.
		}
		if err != nil {
			return nil, fmt.Errorf("%w: header %s is not an RFC 3339 time", broker.ErrUndecodable, k)
		}
	}
	if m.MaxAttempts > broker.MaxAttemptsLimit {
		// A plain asynq client's MaxRetry beyond the framework's range.
		m.MaxAttempts = broker.MaxAttemptsLimit
	}
	if err := broker.CheckDecoded(m); err != nil {
		// An ID a plain asynq client or a tampered hash gave it: the
		// runtime's ledger would refuse it and it would loop.
		return nil, err
	}
	return m, nil
}
