package awslambda_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	switchyard "github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/embedded" // mem://
	"github.com/switchyard-dev/switchyard/adapters/sqs"
	"github.com/switchyard-dev/switchyard/awslambda"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// TestMain gives the SDK dummy credentials when none are set: the
// emulator checks none.
func TestMain(m *testing.M) {
	testenv.EmulatorAWSCredentials()
	os.Exit(m.Run())
}

type okArgs struct{ N int }

func (okArgs) Kind() string { return "lambda.ok" }

type flakyArgs struct{ N int }

func (flakyArgs) Kind() string { return "lambda.flaky" }

type badArgs struct{ N int }

func (badArgs) Kind() string { return "lambda.bad" }

type snoozeArgs struct{ N int }

func (snoozeArgs) Kind() string { return "lambda.snooze" }

type slowArgs struct{ N int }

func (slowArgs) Kind() string { return "lambda.slow" }

// env is one test's broker, ledger, client, server and raw SQS access.
type env struct {
	t      *testing.T
	b      *broker.Broker
	d      *sqs.Driver
	l      ledger.Ledger
	client *switchyard.Client
	srv    *switchyard.Server
	live   string // the interactive lane's live queue URL
	dead   string
	name   string // its live queue name
}

func newEnv(t *testing.T) *env {
	t.Helper()
	endpoint := testenv.SQS.Endpoint(t)
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	ns := "lambda" + hex.EncodeToString(rb[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, "sqs://?region=us-east-1&endpoint="+url.QueryEscape(endpoint)+"&namespace="+ns, nil)
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	l, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatalf("open ledger: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	client, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: l,
		Retry: scheduler.RetryPolicy{MaxAttempts: 5, Base: time.Second, Max: time.Second, Jitter: scheduler.NoJitter}})
	if err != nil {
		t.Fatal(err)
	}
	d := b.Driver().(*sqs.Driver)
	live, dead, err := d.QueueURLs(ctx, "interactive")
	if err != nil {
		t.Fatalf("queues: %v", err)
	}
	name, _ := d.QueueNames("interactive")
	return &env{t: t, b: b, d: d, l: l, client: client, srv: srv, live: live, dead: dead, name: name}
}

func (e *env) enqueue(args switchyard.TaskArgs) string {
	e.t.Helper()
	r, err := e.client.Enqueue(context.Background(), args, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		e.t.Fatalf("enqueue: %v", err)
	}
	return r.ID
}

// receive plays the event-source mapping: it receives up to want raw
// messages (polling at most ~20 s) and builds the SQS event it would send.
func (e *env) receive(want int) events.SQSEvent {
	e.t.Helper()
	var ev events.SQSEvent
	for range 20 {
		out, err := e.d.Client().ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(e.live), MaxNumberOfMessages: int32(min(want-len(ev.Records), 10)),
			VisibilityTimeout: 60, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			e.t.Fatalf("receive: %v", err)
		}
		for _, m := range out.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{
				MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
				Attributes: m.Attributes, EventSource: "aws:sqs", AWSRegion: "us-east-1",
				EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:" + e.name,
			})
		}
		if len(ev.Records) >= want {
			return ev
		}
	}
	e.t.Fatalf("received %d of %d messages", len(ev.Records), want)
	return ev
}

// invoke runs the function like the Lambda runtime, with a deadline, and
// then does what the mapping does with the response: deletes the records
// not reported failed.
func (e *env) invoke(fn *awslambda.Function, ev events.SQSEvent, timeout time.Duration) map[string]bool {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := fn.Handle(ctx, ev)
	if err != nil {
		e.t.Fatalf("Handle: %v", err)
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	for _, r := range ev.Records {
		if !failed[r.MessageId] {
			_, _ = e.d.Client().DeleteMessage(context.Background(), &awssqs.DeleteMessageInput{QueueUrl: aws.String(e.live), ReceiptHandle: aws.String(r.ReceiptHandle)})
		}
	}
	return failed
}

func (e *env) counts(queue string) (visible, inflight int) {
	e.t.Helper()
	out, err := e.d.Client().GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(queue),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		e.t.Fatalf("attributes: %v", err)
	}
	fmt.Sscan(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)], &visible)
	fmt.Sscan(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)], &inflight)
	return visible, inflight
}

// deadLetters reads the lane's dead letters the way `switchyard dlq ls`
// does, by task ID (or SQS MessageId for foreign bodies), polling a little.
func (e *env) deadLetters(want int) map[string]*broker.DeadLetter {
	e.t.Helper()
	got := map[string]*broker.DeadLetter{}
	for range 20 {
		ds, err := e.b.Receive(context.Background(), broker.ReceiveRequest{Lane: "interactive", DeadLetters: true, Max: 10, Lease: time.Minute, Wait: time.Second})
		if err != nil {
			e.t.Fatalf("receive dead letters: %v", err)
		}
		for _, d := range ds {
			if d.DeadLetter != nil && d.DeadLetter.Reason == broker.ReasonUndecodable {
				got["body:"+string(d.Body)] = d.DeadLetter // a foreign body keeps no ID
				continue
			}
			got[d.ID] = d.DeadLetter
		}
		if len(got) >= want {
			break
		}
	}
	return got
}

func (e *env) state(id string) ledger.State {
	e.t.Helper()
	tk, err := e.l.Get(context.Background(), id)
	if err != nil {
		e.t.Fatalf("ledger get %s: %v", id, err)
	}
	return tk.State
}

// One batch with a success, a retry, a permanent failure, a snooze, a
// foreign body and a record from an unknown queue: each record gets its
// own fate, and exactly the retry and the unknown queue come back.
func TestHandle_OneBatchEveryOutcome(t *testing.T) {
	e := newEnv(t)
	var effects, flakyRuns atomic.Int32
	must(t, switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[okArgs]) error {
		v, err := switchyard.Step(ctx, "double", func(context.Context) (int, error) { return tk.Args.N * 2, nil })
		if err != nil {
			return err
		}
		_, err = switchyard.Effect(ctx, "send", func(context.Context) (int, error) { effects.Add(1); return v, nil }, nil)
		return err
	}, nil))
	must(t, switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[flakyArgs]) error {
		if flakyRuns.Add(1) == 1 {
			return errors.New("model overloaded")
		}
		return nil
	}, nil))
	must(t, switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[badArgs]) error {
		return switchyard.Permanent(errors.New("the document is empty"))
	}, nil))
	var snoozed atomic.Int32
	must(t, switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[snoozeArgs]) error {
		if snoozed.Add(1) == 1 {
			return scheduler.Snooze(time.Second)
		}
		return nil
	}, nil))
	fn, err := awslambda.New(e.srv, nil)
	must(t, err)

	okID := e.enqueue(okArgs{N: 21})
	flakyID := e.enqueue(flakyArgs{N: 1})
	badID := e.enqueue(badArgs{N: 1})
	snoozeID := e.enqueue(snoozeArgs{N: 1})
	const foreignBody = `{"hello":"from another producer"}`
	_, err = e.d.Client().SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: aws.String(e.live), MessageBody: aws.String(foreignBody)})
	must(t, err)

	ev := e.receive(5)
	stray := events.SQSMessage{MessageId: "stray-1", ReceiptHandle: "stray-handle", Body: "x",
		EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:someone-elses-queue"}
	ev.Records = append(ev.Records, stray)
	idOf := map[string]string{} // SQS MessageId -> task ID
	for _, r := range ev.Records {
		if dv, err := e.d.DeliveryFromRecord(context.Background(), "interactive", sqs.Record{Body: r.Body, ReceiptHandle: "x", QueueName: e.name}); err == nil {
			idOf[r.MessageId] = dv.ID
		}
	}
	failed := e.invoke(fn, ev, time.Minute)

	var failedTasks []string
	for m := range failed {
		if id, ok := idOf[m]; ok {
			failedTasks = append(failedTasks, id)
		} else {
			failedTasks = append(failedTasks, m)
		}
	}
	slices.Sort(failedTasks)
	want := []string{flakyID, "stray-1"}
	slices.Sort(want)
	if !slices.Equal(failedTasks, want) {
		t.Fatalf("batchItemFailures = %v, want the retry and the stray record %v", failedTasks, want)
	}
	if got := e.state(okID); got != ledger.Completed {
		t.Errorf("ok task is %s, want completed", got)
	}
	if got := e.state(flakyID); got != ledger.RetryWait {
		t.Errorf("flaky task is %s, want retry_wait", got)
	}
	if got := e.state(badID); got != ledger.Dead {
		t.Errorf("permanent task is %s, want dead", got)
	}
	if effects.Load() != 1 {
		t.Errorf("effect ran %d times, want 1", effects.Load())
	}

	dls := e.deadLetters(2)
	if dl := dls[badID]; dl == nil || dl.Reason != broker.ReasonPermanent || !strings.Contains(dl.Error, "the document is empty") {
		t.Errorf("dead letter of the permanent task = %+v, want reason %s with its error", dl, broker.ReasonPermanent)
	}
	if dl := dls["body:"+foreignBody]; dl == nil || dl.Reason != broker.ReasonUndecodable {
		t.Errorf("dead letter of the foreign body = %+v, want reason %s", dl, broker.ReasonUndecodable)
	}

	// The retry (visible again after its 1 s backoff) and the snoozed
	// task's fresh copy come back; a second invocation finishes both.
	ev2 := e.receive(2)
	failed2 := e.invoke(fn, ev2, time.Minute)
	if len(failed2) != 0 {
		t.Fatalf("second invocation failed %d records", len(failed2))
	}
	for _, id := range []string{flakyID, snoozeID} {
		if got := e.state(id); got != ledger.Completed {
			t.Errorf("task %s is %s after the second invocation, want completed", id, got)
		}
	}
	if v, f := e.counts(e.live); v != 0 || f != 0 {
		t.Errorf("live queue holds %d visible, %d in flight; want empty", v, f)
	}
	if flakyRuns.Load() != 2 || snoozed.Load() != 2 {
		t.Errorf("flaky ran %d times, snoozed %d; want 2 and 2", flakyRuns.Load(), snoozed.Load())
	}
}

// The invocation's deadline arrives while a handler runs (the Lambda
// timeout): the handler's context ends Reserve before it, the task is
// handed back, and the next invocation finishes it without repeating its
// confirmed effect. A record whose estimate does not fit is not started.
func TestHandle_DeadlineMidTaskEffectOnce(t *testing.T) {
	e := newEnv(t)
	var effects, runs atomic.Int32
	must(t, switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[slowArgs]) error {
		runs.Add(1)
		if _, err := switchyard.Effect(ctx, "charge", func(context.Context) (int, error) { effects.Add(1); return 1, nil }, nil); err != nil {
			return err
		}
		if runs.Load() == 1 {
			<-ctx.Done() // a long model call, cut short by the deadline
			return ctx.Err()
		}
		return nil
	}, nil))
	fn, err := awslambda.New(e.srv, &awslambda.Options{Reserve: time.Second})
	must(t, err)

	id := e.enqueue(slowArgs{N: 1})
	failed := e.invoke(fn, e.receive(1), 2*time.Second)
	if len(failed) != 0 {
		t.Fatalf("the interrupted task was reported failed (%v); want it handed back as a fresh copy", failed)
	}
	if got := e.state(id); got != ledger.Queued {
		t.Fatalf("interrupted task is %s, want queued", got)
	}
	failed = e.invoke(fn, e.receive(1), time.Minute)
	if len(failed) != 0 {
		t.Fatalf("the second invocation failed %v", failed)
	}
	if got := e.state(id); got != ledger.Completed {
		t.Fatalf("task is %s, want completed", got)
	}
	if runs.Load() != 2 || effects.Load() != 1 {
		t.Fatalf("handler ran %d times and the effect %d; want 2 and 1", runs.Load(), effects.Load())
	}

	// A record whose estimate does not fit before the deadline is handed
	// back unstarted: no attempt, the same attempt number next time.
	late, err := awslambda.New(e.srv, &awslambda.Options{Reserve: time.Second, Estimate: func(string) time.Duration { return time.Hour }})
	must(t, err)
	id2 := e.enqueue(slowArgs{N: 2})
	if failed := e.invoke(late, e.receive(1), time.Minute); len(failed) != 0 {
		t.Fatalf("an unstarted record was reported failed: %v", failed)
	}
	as, err := e.l.Attempts(context.Background(), id2)
	must(t, err)
	if len(as) != 0 || runs.Load() != 2 {
		t.Fatalf("the unstarted task has %d attempts and the handler ran %d times; want 0 and 2", len(as), runs.Load())
	}
	ev := e.receive(1)
	dv, err := e.d.DeliveryFromRecord(context.Background(), "interactive", sqs.Record{MessageID: ev.Records[0].MessageId, ReceiptHandle: ev.Records[0].ReceiptHandle,
		Body: ev.Records[0].Body, Attributes: ev.Records[0].Attributes, QueueName: e.name})
	must(t, err)
	if dv.ID != id2 {
		t.Fatalf("the handed-back copy is task %s, want %s", dv.ID, id2)
	}
	if failed := e.invoke(fn, ev, time.Minute); len(failed) != 0 || e.state(id2) != ledger.Completed {
		t.Fatalf("the handed-back task did not complete: failed %v, state %s", failed, e.state(id2))
	}
}

// More records than MaxBatch: the extra ones are reported failed without
// touching the ones within the limit.
func TestHandle_OversizedBatch(t *testing.T) {
	e := newEnv(t)
	must(t, switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[okArgs]) error { return nil }, nil))
	fn, err := awslambda.New(e.srv, &awslambda.Options{MaxBatch: 2})
	must(t, err)
	for i := range 3 {
		e.enqueue(okArgs{N: i})
	}
	ev := e.receive(3)
	failed := e.invoke(fn, ev, time.Minute)
	if len(failed) != 1 || !failed[ev.Records[2].MessageId] {
		t.Fatalf("batchItemFailures = %v, want only the third record", failed)
	}
	// The failed record comes back after its visibility timeout; nothing
	// else is left.
	if v, f := e.counts(e.live); v+f != 1 {
		t.Fatalf("live queue holds %d visible + %d in flight, want the 1 reported record", v, f)
	}
}

func TestNew_NotSQS(t *testing.T) {
	b, err := broker.Open(context.Background(), "mem://lambda-not-sqs", nil)
	must(t, err)
	defer b.Close()
	srv, err := switchyard.NewServer(b, nil)
	must(t, err)
	if _, err := awslambda.New(srv, nil); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("New over a mem broker = %v, want ErrInvalid", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// FIFO: at the first record of a message group that is not done, the
// group's later records are not run; they are reported failed and made
// visible again at once. (The emulator, like SQS, returns one message of a
// group per receive while it is in flight, so the failing first record is
// a synthetic one of the same group: a record from a queue no lane maps
// to.)
func TestHandle_FIFOStopsGroupAtFirstFailure(t *testing.T) {
	endpoint := testenv.SQS.Endpoint(t)
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	ctx := context.Background()
	b, err := broker.Open(ctx, "sqs://?region=us-east-1&fifo=true&endpoint="+url.QueryEscape(endpoint)+"&namespace=lfifo"+hex.EncodeToString(rb[:]), nil)
	must(t, err)
	t.Cleanup(func() { b.Close() })
	srv, err := switchyard.NewServer(b, nil)
	must(t, err)
	var runs atomic.Int32
	must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[okArgs]) error { runs.Add(1); return nil }, nil))
	fn, err := awslambda.New(srv, nil)
	must(t, err)
	client, err := switchyard.NewClient(b, nil)
	must(t, err)
	_, err = client.Enqueue(ctx, okArgs{N: 1}, &switchyard.EnqueueOpts{Lane: "interactive", OrderingKey: "order-7"})
	must(t, err)
	_, err = client.Enqueue(ctx, okArgs{N: 2}, &switchyard.EnqueueOpts{Lane: "interactive", OrderingKey: "other"})
	must(t, err)

	d := b.Driver().(*sqs.Driver)
	live, _, err := d.QueueURLs(ctx, "interactive")
	must(t, err)
	name, _ := d.QueueNames("interactive")
	e := &env{t: t, d: d, live: live, name: name}
	ev := e.receive(2)
	var group string
	for _, r := range ev.Records {
		if r.Attributes["MessageGroupId"] != "" && strings.Contains(r.Attributes["MessageGroupId"], "order-7") {
			group = r.Attributes["MessageGroupId"]
		}
	}
	if group == "" {
		t.Fatalf("no record of group order-7 among %d", len(ev.Records))
	}
	bad := events.SQSMessage{MessageId: "bad-first", ReceiptHandle: "x", Body: "x", Attributes: map[string]string{"MessageGroupId": group},
		EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:not-a-lane-queue.fifo"}
	ev.Records = append([]events.SQSMessage{bad}, ev.Records...)

	failed := e.invoke(fn, ev, time.Minute)
	var keyed string
	for _, r := range ev.Records[1:] {
		if r.Attributes["MessageGroupId"] == group {
			keyed = r.MessageId
		}
	}
	if len(failed) != 2 || !failed["bad-first"] || !failed[keyed] {
		t.Fatalf("batchItemFailures %v, want the bad record and the rest of its group (%s)", failed, keyed)
	}
	if runs.Load() != 1 {
		t.Fatalf("the handler ran %d times, want once (the other group only)", runs.Load())
	}
	// The held-back record is visible again at once, not after its 60 s
	// visibility timeout.
	if again := e.receive(1); again.Records[0].Attributes["MessageGroupId"] != group {
		t.Fatalf("received %v again, want the group's record", again.Records[0].Attributes)
	}
}

type stuckArgs struct{ N int }

func (stuckArgs) Kind() string { return "lambda.stuck" }

// A handler that ignores its context past the deadline (the Lambda
// timeout, as far as the invocation can tell): Handle still returns before
// the deadline, with the record reported failed (never lost), and when the
// task comes back its confirmed effect is not repeated.
func TestHandle_HandlerIgnoresDeadline(t *testing.T) {
	e := newEnv(t)
	var effects, runs atomic.Int32
	release := make(chan struct{})
	must(t, switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[stuckArgs]) error {
		n := runs.Add(1)
		if _, err := switchyard.Effect(ctx, "charge", func(context.Context) (int, error) { effects.Add(1); return 1, nil }, nil); err != nil {
			return err
		}
		if n == 1 {
			<-release // deaf to ctx
			return ctx.Err()
		}
		return nil
	}, nil))
	fn, err := awslambda.New(e.srv, &awslambda.Options{Reserve: 2 * time.Second})
	must(t, err)
	id := e.enqueue(stuckArgs{N: 1})
	ev := e.receive(1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	resp, err := fn.Handle(ctx, ev)
	returnedBeforeDeadline := ctx.Err() == nil
	cancel()
	must(t, err)
	if !returnedBeforeDeadline {
		t.Errorf("Handle returned after the invocation's deadline")
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[0].MessageId {
		t.Fatalf("batchItemFailures %v, want the stuck record", resp.BatchItemFailures)
	}
	// The stuck handler finally returns (its context had ended): the run
	// hands the task back. Wait for it (bounded), as the next invocation
	// of a real function would find it.
	close(release)
	for i := 0; e.state(id) == ledger.Running; i++ {
		if i == 200 {
			t.Fatal("the stuck run never ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if failed := e.invoke(fn, e.receive(1), time.Minute); len(failed) != 0 {
		t.Fatalf("the second invocation failed %v", failed)
	}
	if e.state(id) != ledger.Completed || runs.Load() != 2 || effects.Load() != 1 {
		t.Fatalf("state %s, runs %d, effects %d; want completed, 2, 1", e.state(id), runs.Load(), effects.Load())
	}
}
