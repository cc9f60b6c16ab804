package asynq

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchyard-dev/switchyard/broker"
)

func TestTaskMessage_RoundTrip(t *testing.T) {
	t.Parallel()
	m := &taskMessage{
		Type: "email:send", Payload: []byte{0, 1, 2, 0xff}, ID: "id-1", Queue: "ns:batch", Retry: 24, Retried: 3,
		ErrorMsg: "boom", Timeout: 1800, Deadline: 1700000000, UniqueKey: "u", LastFailedAt: 1700000001,
		Retention: 60, CompletedAt: 1700000002, GroupKey: "g", Headers: map[string]string{"a": "1", "b": ""},
	}
	// A field from a newer asynq survives a decode and encode.
	future := protowire.AppendTag(nil, 99, protowire.BytesType)
	future = protowire.AppendString(future, "future")
	enc := append(m.encode(), future...)
	got, err := decodeTaskMessage(enc)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.unknown) != string(future) {
		t.Errorf("unknown field not kept: %q", got.unknown)
	}
	got.unknown = nil
	if !reflect.DeepEqual(got, m) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, m)
	}
	again, err := decodeTaskMessage(append(got.encode(), future...))
	if err != nil || again.Retried != 3 {
		t.Errorf("re-decode: %+v %v", again, err)
	}
}

func TestTaskMessage_GarbageNeverPanics(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	valid := (&taskMessage{Type: "k", ID: "x", Headers: map[string]string{"h": "v"}, Payload: []byte("body")}).encode()
	for i := 0; i < 20000; i++ {
		var b []byte
		if i%2 == 0 {
			b = make([]byte, r.IntN(64))
			for j := range b {
				b[j] = byte(r.UintN(256))
			}
		} else {
			// Mutate a valid message: flip, cut or extend.
			b = append([]byte(nil), valid...)
			b[r.IntN(len(b))] ^= byte(1 + r.UintN(255))
			if r.IntN(2) == 0 {
				b = b[:r.IntN(len(b))]
			}
		}
		m, err := decodeTaskMessage(b)
		if err != nil && !errors.Is(err, errBadProto) {
			t.Fatalf("error %v does not wrap errBadProto", err)
		}
		if err == nil {
			_, _ = fromTask(m, "x", "lane")
		}
	}
}

func TestMapping_RoundTrip(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	m := &broker.Message{
		ID: "01", Lane: "batch", Kind: "k.v", Body: []byte("b"), Headers: map[string]string{"x": "y", broker.HeaderHoldUntil: "z"},
		IdempotencyKey: "idem", OrderingKey: "ord", Tenant: "t", RunAt: now.Add(time.Hour), EnqueuedAt: now, MaxAttempts: 3,
	}
	tm, err := toTask(m, "ns:batch")
	if err != nil {
		t.Fatal(err)
	}
	if tm.Retry != 2 || tm.Type != "k.v" || tm.Queue != "ns:batch" {
		t.Errorf("task = %+v", tm)
	}
	dec, err := decodeTaskMessage(tm.encode())
	if err != nil {
		t.Fatal(err)
	}
	back, err := fromTask(dec, "01", "batch")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, m)
	}
	if _, err := fromTask(dec, "other-id", "batch"); !errors.Is(err, broker.ErrUndecodable) {
		t.Errorf("ID mismatch: %v, want ErrUndecodable", err)
	}
	bad := &broker.Message{ID: "01", Lane: "batch", Kind: "k", Headers: map[string]string{"x": "\xff"}}
	if _, err := toTask(bad, "q"); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("invalid UTF-8 header: %v, want ErrInvalid", err)
	}
}
