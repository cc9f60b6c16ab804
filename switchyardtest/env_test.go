package switchyardtest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/switchyardtest"
)

type summariseArgs struct {
	DocID string `json:"doc_id"`
}

func (summariseArgs) Kind() string { return "test.summarise" }

type notifyArgs struct {
	DocID   string `json:"doc_id"`
	Summary string `json:"summary"`
}

func (notifyArgs) Kind() string { return "test.notify" }

// fastRetry retries after a fixed second on the fake clock.
var fastRetry = &switchyard.ServerConfig{Retry: scheduler.RetryPolicy{Base: time.Second, Max: time.Second, Jitter: scheduler.NoJitter}}

func TestEnv_RunUntilIdleRunsHandlersAndTheirTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := switchyardtest.New(t, nil)
	var notified atomic.Int32
	switchyard.Register(env.Server, func(ctx context.Context, task *switchyard.Task[summariseArgs]) error {
		_, err := env.Client.Enqueue(ctx, notifyArgs{DocID: task.Args.DocID, Summary: "short"}, nil)
		return err
	}, nil)
	switchyard.Register(env.Server, func(ctx context.Context, task *switchyard.Task[notifyArgs]) error {
		notified.Add(1)
		return nil
	}, nil)

	res, err := env.Client.Enqueue(ctx, summariseArgs{DocID: "d1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env.RunUntilIdle()

	if got := notified.Load(); got != 1 {
		t.Fatalf("notify ran %d times, want 1 (RunUntilIdle must run tasks enqueued by handlers)", got)
	}
	switchyardtest.ExpectEnqueued(t, env, summariseArgs{DocID: "d1"})
	switchyardtest.ExpectEnqueued(t, env, notifyArgs{DocID: "d1", Summary: "short"})
	if got := env.Task(res.ID).Task.State; got != ledger.Completed {
		t.Fatalf("task state %s, want completed", got)
	}
	all := env.Enqueued()
	if len(all) != 2 || all[0].Kind != "test.summarise" || all[1].Kind != "test.notify" || all[0].Lane != "batch" {
		t.Fatalf("Enqueued() = %+v, want summarise then notify on lane batch", all)
	}
}

func TestEnv_DelayWaitsForTheClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := switchyardtest.New(t, nil)
	var ran atomic.Int32
	switchyard.Register(env.Server, func(ctx context.Context, task *switchyard.Task[summariseArgs]) error {
		ran.Add(1)
		return nil
	}, nil)
	if _, err := env.Client.Enqueue(ctx, summariseArgs{DocID: "later"}, &switchyard.EnqueueOpts{Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	env.RunUntilIdle()
	if ran.Load() != 0 {
		t.Fatal("a task delayed by an hour ran before the clock moved")
	}
	if st := env.Stats("scheduled"); st.Delayed != 1 {
		t.Fatalf("scheduled lane stats %+v, want 1 delayed", st)
	}
	env.Advance(59 * time.Minute)
	if ran.Load() != 0 {
		t.Fatal("a task delayed by an hour ran after 59 minutes")
	}
	env.Advance(time.Minute)
	if ran.Load() != 1 {
		t.Fatalf("the delayed task ran %d times once its hour passed, want 1", ran.Load())
	}
	if got := switchyardtest.EnqueuedOf[summariseArgs](env); len(got) != 1 {
		t.Fatalf("EnqueuedOf = %v", got)
	}
	if e := env.Enqueued()[0]; !e.RunAt.Equal(env.Clock.Now()) {
		t.Fatalf("RunAt %v, want the fake clock's start plus an hour (%v)", e.RunAt, env.Clock.Now())
	}
}

func TestEnv_FailStepOnceRetriesWithEarlierStepsMemoised(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := switchyardtest.New(t, &switchyardtest.Options{Server: fastRetry})
	var drafts, sends atomic.Int32
	var attempts []int
	switchyard.Register(env.Server, func(ctx context.Context, task *switchyard.Task[summariseArgs]) error {
		attempts = append(attempts, task.Attempt)
		draft, err := switchyard.Step(ctx, "draft", func(ctx context.Context) (string, error) {
			drafts.Add(1)
			return "draft of " + task.Args.DocID, nil
		})
		if err != nil {
			return err
		}
		_, err = switchyard.Step(ctx, "send", func(ctx context.Context) (string, error) {
			sends.Add(1)
			return "sent " + draft, nil
		})
		return err
	}, nil)
	env.FailStepOnce("send", nil)

	res, err := env.Client.Enqueue(ctx, summariseArgs{DocID: "d2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env.RunUntilIdle()
	if st := env.Task(res.ID).Task.State; st != ledger.RetryWait {
		t.Fatalf("after the injected failure the task is %s, want retry_wait", st)
	}
	env.Advance(time.Second)
	info := env.Task(res.ID)
	if info.Task.State != ledger.Completed {
		t.Fatalf("after the retry the task is %s, want completed", info.Task.State)
	}
	if drafts.Load() != 1 || sends.Load() != 1 {
		t.Fatalf("draft ran %d times and send %d times, want 1 and 1 (the retry reuses the memoised draft)", drafts.Load(), sends.Load())
	}
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
		t.Fatalf("attempts %v, want [1 2]", attempts)
	}
	if len(info.Attempts) != 2 || info.Attempts[0].Error == "" {
		t.Fatalf("ledger attempts %+v, want two with the first failed", info.Attempts)
	}
}

func TestEnv_FailEffectOncePermanentDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := switchyardtest.New(t, nil)
	var charged atomic.Int32
	switchyard.Register(env.Server, func(ctx context.Context, task *switchyard.Task[summariseArgs]) error {
		_, err := switchyard.Effect(ctx, "charge", func(ctx context.Context) (int, error) {
			charged.Add(1)
			return 1, nil
		}, nil)
		return err
	}, nil)
	env.FailEffectOnce("charge", switchyard.Permanent(errors.New("card declined")))
	res, err := env.Client.Enqueue(ctx, summariseArgs{DocID: "d3"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	env.RunUntilIdle()
	info := env.Task(res.ID)
	if info.Task.State != ledger.Dead || charged.Load() != 0 {
		t.Fatalf("task %s with the effect run %d times, want dead and 0", info.Task.State, charged.Load())
	}
	if st := env.Stats("interactive"); st.DeadLettered != 1 {
		t.Fatalf("interactive lane %+v, want one dead letter", st)
	}
	// The failure was used once: the next task performs the effect.
	if _, err := env.Client.Enqueue(ctx, summariseArgs{DocID: "d4"}, nil); err != nil {
		t.Fatal(err)
	}
	env.RunUntilIdle()
	if charged.Load() != 1 {
		t.Fatalf("the effect ran %d times for the second task, want 1", charged.Load())
	}
}

func TestEnv_LeaseExpiresOnTheClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := switchyardtest.New(t, nil)
	if _, err := env.Client.Enqueue(ctx, summariseArgs{DocID: "d5"}, nil); err != nil {
		t.Fatal(err)
	}
	// A consumer that takes the task and stops, as a killed worker does.
	ds, err := env.Broker.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Minute})
	if err != nil || len(ds) != 1 || ds[0].Attempt != 1 {
		t.Fatalf("receive: %v %+v", err, ds)
	}
	if again, _ := env.Broker.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Minute}); len(again) != 0 {
		t.Fatal("a leased task was delivered again before its lease ran out")
	}
	env.Clock.Advance(time.Minute + time.Second)
	again, err := env.Broker.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Minute})
	if err != nil || len(again) != 1 || again[0].Attempt != 2 || again[0].ID != ds[0].ID {
		t.Fatalf("after the lease: %v %+v, want the same task at attempt 2", err, again)
	}
}

func TestEnv_NoLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := switchyardtest.New(t, &switchyardtest.Options{NoLedger: true, Server: fastRetry})
	var calls atomic.Int32
	switchyard.Register(env.Server, func(ctx context.Context, task *switchyard.Task[summariseArgs]) error {
		_, err := switchyard.Step(ctx, "draft", func(ctx context.Context) (int, error) {
			return int(calls.Add(1)), nil
		})
		return err
	}, nil)
	env.FailStepOnce("draft", nil)
	if _, err := env.Client.Enqueue(ctx, summariseArgs{DocID: "d6"}, nil); err != nil {
		t.Fatal(err)
	}
	env.RunUntilIdle()
	if calls.Load() != 0 || env.Stats("batch").Delayed != 1 {
		t.Fatalf("after the injected failure: %d calls, stats %+v; want 0 and one delayed retry", calls.Load(), env.Stats("batch"))
	}
	env.Advance(time.Second)
	if calls.Load() != 1 {
		t.Fatalf("the retry called the step %d times, want 1", calls.Load())
	}
	if env.Ledger != nil {
		t.Fatal("NoLedger env has a ledger")
	}
}
