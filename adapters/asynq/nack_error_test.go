package asynq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	asynqadapter "github.com/switchyard-dev/switchyard/adapters/asynq"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/scheduler"
)

var _ broker.NackErrorer = (*asynqadapter.Driver)(nil)

// TestInterop_RetryLastErr: a handler's error travels with the nack, so
// asynq's Inspector (and asynqmon) shows a Switchyard task waiting to be
// retried with the error as its LastErr, as for asynq's own retries; a
// plain Nack leaves no error.
func TestInterop_RetryLastErr(t *testing.T) {
	t.Parallel()
	b, ns, addr := interopSetup(t)
	ctx := context.Background()
	q := asynqadapter.QueueName(ns, "batch")
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: addr})
	defer insp.Close()

	s, err := scheduler.New(b, &scheduler.Config{Slots: 8, Lease: 5 * time.Second, PollWait: 100 * time.Millisecond,
		Retry: scheduler.RetryPolicy{Base: time.Hour, Max: time.Hour, Jitter: scheduler.NoJitter, MaxAttempts: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Handle("test.fail", func(ctx context.Context, job *scheduler.Job) ([]byte, error) {
		return nil, errors.New("upstream answered 503 (try later)")
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)
	m := &broker.Message{Lane: "batch", Kind: "test.fail", Body: []byte(`{}`)}
	if _, err := b.Publish(ctx, m); err != nil {
		t.Fatal(err)
	}
	var retry []*asynq.TaskInfo
	for deadline := time.Now().Add(10 * time.Second); len(retry) == 0 && time.Now().Before(deadline); {
		if retry, err = insp.ListRetryTasks(q); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(retry) != 1 || retry[0].ID != m.ID || !strings.Contains(retry[0].LastErr, "upstream answered 503 (try later)") ||
		retry[0].Retried != 1 || retry[0].LastFailedAt.IsZero() {
		t.Fatalf("asynq's retry list = %+v", retry)
	}

	// A plain Nack records no error (on a lane the scheduler does not serve).
	m2 := &broker.Message{Lane: "side", Kind: "other", Body: []byte(`{}`)}
	if _, err := b.Publish(ctx, m2); err != nil {
		t.Fatal(err)
	}
	ds := recv(t, b, "side", 1, time.Minute)
	if len(ds) != 1 {
		t.Fatalf("received %d", len(ds))
	}
	if err := b.Nack(ctx, ds[0], time.Hour); err != nil {
		t.Fatal(err)
	}
	ti, err := insp.GetTaskInfo(asynqadapter.QueueName(ns, "side"), m2.ID)
	if err != nil || ti.State != asynq.TaskStateRetry || ti.LastErr != "" {
		t.Fatalf("a plain Nack: %+v, %v", ti, err)
	}
}
