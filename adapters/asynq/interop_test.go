package asynq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	asynqadapter "github.com/switchyard-dev/switchyard/adapters/asynq"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// interopSetup opens a Broker on the machine's Redis in a fresh namespace
// and returns it with the namespace and Redis address.
func interopSetup(t *testing.T) (*broker.Broker, string, string) {
	t.Helper()
	addr := testenv.Redis.Endpoint(t)
	ns := conformance.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, "redis://"+addr+"/0?namespace="+ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); cleanupNamespace(addr, ns) })
	return b, ns, addr
}

func recv(t *testing.T, b *broker.Broker, lane string, n int, lease time.Duration) []*broker.Delivery {
	t.Helper()
	var out []*broker.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: n - len(out), Lease: lease, Wait: time.Second})
		cancel()
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		out = append(out, ds...)
	}
	return out
}

// TestInterop_AsynqClientToSwitchyard: tasks enqueued by a plain asynq
// client (now, scheduled, with headers, MaxRetry and TaskID) are received
// with Kind = type, Body = payload, ID = task ID, MaxAttempts = MaxRetry+1;
// a nack shows in asynq's Inspector as a retry with Retried = 1.
func TestInterop_AsynqClientToSwitchyard(t *testing.T) {
	t.Parallel()
	b, ns, addr := interopSetup(t)
	ctx := context.Background()
	q := asynqadapter.QueueName(ns, "interactive")
	cl := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
	defer cl.Close()
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: addr})
	defer insp.Close()

	task := asynq.NewTaskWithHeaders("email:welcome", []byte(`{"user":42}`), map[string]string{"traceparent": "00-abc-01"})
	info, err := cl.EnqueueContext(ctx, task, asynq.Queue(q), asynq.MaxRetry(4), asynq.TaskID("welcome-42"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.EnqueueContext(ctx, asynq.NewTask("email:later", []byte("l")), asynq.Queue(q), asynq.ProcessIn(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	ds := recv(t, b, "interactive", 1, 30*time.Second)
	if len(ds) != 1 {
		t.Fatal("asynq-enqueued task not received")
	}
	d := ds[0]
	if d.ID != info.ID || d.ID != "welcome-42" || d.Kind != "email:welcome" || string(d.Body) != `{"user":42}` ||
		d.Headers["traceparent"] != "00-abc-01" || d.MaxAttempts != 5 || d.Attempt != 1 || d.Lane != "interactive" {
		t.Fatalf("delivery = %+v", d.Message)
	}
	if err := b.Nack(ctx, d, time.Minute); err != nil {
		t.Fatal(err)
	}
	ti, err := insp.GetTaskInfo(q, "welcome-42")
	if err != nil {
		t.Fatal(err)
	}
	if ti.State != asynq.TaskStateRetry || ti.Retried != 1 || ti.MaxRetry != 4 || ti.Type != "email:welcome" {
		t.Errorf("inspector after nack: state %v retried %d max %d type %s", ti.State, ti.Retried, ti.MaxRetry, ti.Type)
	}
	// Publishing the same task ID through Switchyard is a duplicate (asynq's
	// TaskID semantics).
	r, err := b.PublishOne(ctx, &broker.Message{ID: "welcome-42", Lane: "interactive", Kind: "email:welcome"})
	if err != nil || !r.Duplicate || r.ID != "welcome-42" {
		t.Errorf("publish of an existing task ID = %+v, %v; want a duplicate", r, err)
	}
	// The scheduled one arrives after its time.
	later := recv(t, b, "interactive", 1, 30*time.Second)
	if len(later) != 1 || later[0].Kind != "email:later" {
		t.Fatalf("scheduled asynq task: %d deliveries", len(later))
	}
	if err := b.Ack(ctx, later...); err != nil {
		t.Fatal(err)
	}
	if _, err := insp.GetTaskInfo(q, later[0].ID); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Errorf("acked task still known to asynq: %v", err)
	}
	qi, err := insp.GetQueueInfo(q)
	if err != nil {
		t.Fatal(err)
	}
	if qi.Retry != 1 || qi.Pending != 0 || qi.Active != 0 || qi.Processed < 2 || qi.Failed < 1 {
		t.Errorf("queue info: %+v", qi)
	}
}

// TestInterop_SwitchyardToInspector: Switchyard's tasks in every state are
// counted and readable by asynq's Inspector, and a paused queue (asynq's
// PauseQueue) is honoured.
func TestInterop_SwitchyardToInspector(t *testing.T) {
	t.Parallel()
	b, ns, addr := interopSetup(t)
	ctx := context.Background()
	q := asynqadapter.QueueName(ns, "batch")
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: addr})
	defer insp.Close()

	var msgs []*broker.Message
	for i := 0; i < 5; i++ {
		msgs = append(msgs, &broker.Message{Lane: "batch", Kind: "doc.index", Body: []byte{byte('a' + i)}, Tenant: "acme", MaxAttempts: 7, Headers: map[string]string{"k": "v"}})
	}
	later := &broker.Message{Lane: "batch", Kind: "doc.index", RunAt: time.Now().Add(time.Hour)}
	msgs = append(msgs, later)
	if _, err := b.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	ds := recv(t, b, "batch", 3, time.Minute)
	if len(ds) != 3 {
		t.Fatalf("received %d", len(ds))
	}
	if err := b.Nack(ctx, ds[1], time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := b.DeadLetter(ctx, ds[2], &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "bad input"}); err != nil {
		t.Fatal(err)
	}
	qi, err := insp.GetQueueInfo(q)
	if err != nil {
		t.Fatal(err)
	}
	if qi.Pending != 2 || qi.Active != 1 || qi.Scheduled != 1 || qi.Retry != 1 || qi.Archived != 1 {
		t.Errorf("inspector counts pending=%d active=%d scheduled=%d retry=%d archived=%d; want 2 1 1 1 1", qi.Pending, qi.Active, qi.Scheduled, qi.Retry, qi.Archived)
	}
	ti, err := insp.GetTaskInfo(q, ds[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if ti.State != asynq.TaskStateActive || ti.Type != "doc.index" || string(ti.Payload) != string(ds[0].Body) || ti.MaxRetry != 6 ||
		ti.Headers["k"] != "v" || ti.Headers[asynqadapter.HeaderTenant] != "acme" {
		t.Errorf("inspector task = %+v", ti)
	}
	arch, err := insp.ListArchivedTasks(q)
	if err != nil || len(arch) != 1 || arch[0].LastErr != "bad input" || arch[0].ID != ds[2].ID {
		t.Errorf("archived = %+v, %v", arch, err)
	}
	sched, err := insp.ListScheduledTasks(q)
	if err != nil || len(sched) != 1 || sched[0].ID != later.ID || sched[0].NextProcessAt.Sub(later.RunAt).Abs() > 2*time.Second {
		t.Errorf("scheduled = %+v, %v", sched, err)
	}
	if err := b.Ack(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}

	// Paused by asynq's tools: nothing is leased until it is unpaused.
	if err := insp.PauseQueue(q); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	got, err := b.Receive(rctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute, Wait: 300 * time.Millisecond})
	cancel()
	if err != nil || len(got) != 0 {
		t.Errorf("receive from a paused queue: %d deliveries, %v", len(got), err)
	}
	if err := insp.UnpauseQueue(q); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, b, "batch", 2, time.Minute); len(got) != 2 {
		t.Errorf("after unpause received %d, want 2", len(got))
	} else if err := b.Ack(ctx, got...); err != nil {
		t.Fatal(err)
	}
}

// TestInterop_AsynqServerProcessesSwitchyardTasks: the layout is asynq's
// own, so an asynq Server handles tasks Switchyard published (type,
// payload and headers intact) and completes them.
func TestInterop_AsynqServerProcessesSwitchyardTasks(t *testing.T) {
	t.Parallel()
	b, ns, addr := interopSetup(t)
	ctx := context.Background()
	q := asynqadapter.QueueName(ns, "interactive")
	var msgs []*broker.Message
	for i := 0; i < 10; i++ {
		msgs = append(msgs, &broker.Message{Lane: "interactive", Kind: "img.resize", Body: []byte("p"), Headers: map[string]string{"h": "1"}})
	}
	if _, err := b.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]bool{}
	done := make(chan struct{})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, asynq.Config{
		Concurrency: 2, Queues: map[string]int{q: 1}, TaskCheckInterval: 10 * time.Millisecond,
		Logger: quietLogger{}, LogLevel: asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("img.resize", func(ctx context.Context, task *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		mu.Lock()
		defer mu.Unlock()
		if string(task.Payload()) == "p" && task.Headers()["h"] == "1" {
			got[id] = true
		}
		if len(got) == len(msgs) {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return nil
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
	}
	srv.Shutdown()
	mu.Lock()
	defer mu.Unlock()
	for _, m := range msgs {
		if !got[m.ID] {
			t.Errorf("asynq Server did not handle %s", m.ID)
		}
	}
	s, err := b.Stats(ctx, "interactive")
	if err != nil || s.Ready != 0 || s.InFlight != 0 {
		t.Errorf("stats after asynq processed everything: %+v, %v", s, err)
	}
}

type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}
