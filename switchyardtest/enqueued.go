package switchyardtest

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
)

// Enqueued is one task the broker accepted: by the test, or by a handler.
type Enqueued struct {
	ID             string
	Kind           string
	Lane           string
	Tenant         string
	IdempotencyKey string
	OrderingKey    string
	RunAt          time.Time // zero when due at once
	Args           json.RawMessage
	Headers        map[string]string
}

// recorder is the embedded driver, keeping a copy of every message it
// accepts (duplicates refused by deduplication are not kept).
type recorder struct {
	*embedded.Driver
	mu   sync.Mutex
	sent []Enqueued
}

var _ broker.Driver = (*recorder)(nil)

func (r *recorder) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	res, err := r.Driver.Publish(ctx, msgs)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, m := range msgs {
		if i >= len(res) || res[i].Err != nil || res[i].Duplicate {
			continue
		}
		h := make(map[string]string, len(m.Headers))
		for k, v := range m.Headers {
			h[k] = v
		}
		id := res[i].ID
		if id == "" {
			id = m.ID
		}
		r.sent = append(r.sent, Enqueued{ID: id, Kind: m.Kind, Lane: m.Lane, Tenant: m.Tenant,
			IdempotencyKey: m.IdempotencyKey, OrderingKey: m.OrderingKey, RunAt: m.RunAt,
			Args: append(json.RawMessage(nil), m.Body...), Headers: h})
	}
	return res, err
}

// Enqueued returns every task published so far, in order.
func (e *Env) Enqueued() []Enqueued {
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	return append([]Enqueued(nil), e.rec.sent...)
}

// EnqueuedOf returns the arguments of every task of T's kind published so
// far, in order. It fails the test when one does not decode into T.
func EnqueuedOf[T switchyard.TaskArgs](e *Env) []T {
	e.t.Helper()
	var zero T
	var out []T
	for _, m := range e.Enqueued() {
		if m.Kind != zero.Kind() {
			continue
		}
		var v T
		if err := json.Unmarshal(m.Args, &v); err != nil {
			e.t.Fatalf("switchyardtest: task %s of kind %s: arguments do not decode into %T: %v", m.ID, m.Kind, v, err)
		}
		out = append(out, v)
	}
	return out
}

// ExpectEnqueued fails t unless the tasks of T's kind published so far
// have exactly the arguments want, in that order.
func ExpectEnqueued[T switchyard.TaskArgs](t testing.TB, e *Env, want ...T) {
	t.Helper()
	got := EnqueuedOf[T](e)
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		var zero T
		t.Errorf("switchyardtest: tasks of kind %s enqueued:\n got  %+v\n want %+v", zero.Kind(), got, want)
	}
}
