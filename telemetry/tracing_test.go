package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/telemetry"
)

type tracedArgs struct {
	Secret string `json:"secret"`
}

func (tracedArgs) Kind() string { return "test.traced" }

func attr(s tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestTraceAcrossRetries enqueues one task inside a caller's span; the task
// fails twice and succeeds on its third attempt. The in-memory exporter must
// hold one trace: the caller's span, an enqueue span under it, three handle
// spans (attempts 1, 2, 3) as children of the enqueue span, and a step span
// under each handle span. No span carries the arguments or the error text.
func TestTraceAcrossRetries(t *testing.T) {
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	b := openBroker(t)
	tel, err := telemetry.New(&telemetry.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ccfg := &switchyard.ClientConfig{}
	tel.InstrumentClient(ccfg)
	client, err := switchyard.NewClient(b, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	scfg, done := fastServer("work")
	tel.Instrument(scfg)
	srv, err := switchyard.NewServer(b, scfg)
	if err != nil {
		t.Fatal(err)
	}
	must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[tracedArgs]) error {
		if _, err := telemetry.Step(ctx, "think", func(ctx context.Context) (int, error) { return 42, nil }); err != nil {
			return err
		}
		if tk.Attempt < 3 {
			return fmt.Errorf("attempt %d failed near %s", tk.Attempt, tk.Args.Secret)
		}
		return nil
	}, nil))

	rootCtx, root := tp.Tracer("test").Start(ctx, "http request")
	res, err := client.Enqueue(rootCtx, tracedArgs{Secret: "hunter2"}, &switchyard.EnqueueOpts{Lane: "work"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ID
	root.End()

	must(t, srv.Start(ctx))
	ev := waitEvents(t, done, 1)
	if ev[0].Type != "succeeded" || ev[0].Attempt != 3 {
		t.Fatalf("task ended with %s on attempt %d, want succeeded on 3", ev[0].Type, ev[0].Attempt)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	must(t, srv.Stop(stopCtx))

	spans := exp.GetSpans()
	traceID := trace.SpanContextFromContext(rootCtx).TraceID()
	var enq []tracetest.SpanStub
	var handles, steps []tracetest.SpanStub
	for _, s := range spans {
		if s.SpanContext.TraceID() != traceID {
			t.Errorf("span %q is in trace %s, want %s", s.Name, s.SpanContext.TraceID(), traceID)
		}
		switch {
		case s.Name == "enqueue test.traced":
			enq = append(enq, s)
		case s.Name == "handle test.traced":
			handles = append(handles, s)
		case s.Name == "step think":
			steps = append(steps, s)
		case s.Name == "http request":
		default:
			t.Errorf("unexpected span %q", s.Name)
		}
		for _, a := range s.Attributes {
			if v := a.Value.Emit(); strings.Contains(v, "hunter2") || strings.Contains(v, "failed near") {
				t.Errorf("span %q attribute %s = %q carries payload or error text", s.Name, a.Key, v)
			}
		}
		if strings.Contains(s.Status.Description, "hunter2") {
			t.Errorf("span %q status carries the payload", s.Name)
		}
		for _, e := range s.Events {
			t.Errorf("span %q has event %q; error text is off by default", s.Name, e.Name)
		}
	}
	if len(enq) != 1 || len(handles) != 3 || len(steps) != 3 {
		t.Fatalf("got %d enqueue, %d handle, %d step spans; want 1, 3, 3 (%d spans in all)", len(enq), len(handles), len(steps), len(spans))
	}
	e := enq[0]
	if e.Parent.SpanID() != root.SpanContext().SpanID() {
		t.Error("the enqueue span is not a child of the caller's span")
	}
	if e.SpanKind != trace.SpanKindProducer {
		t.Errorf("enqueue span kind %s", e.SpanKind)
	}
	if v, _ := attr(e, telemetry.AttrTaskID); v.AsString() != id {
		t.Errorf("enqueue span task id %q, want %q", v.AsString(), id)
	}

	sort.Slice(handles, func(i, j int) bool {
		a, _ := attr(handles[i], telemetry.AttrAttempt)
		b, _ := attr(handles[j], telemetry.AttrAttempt)
		return a.AsInt64() < b.AsInt64()
	})
	handleIDs := map[trace.SpanID]bool{}
	for i, h := range handles {
		handleIDs[h.SpanContext.SpanID()] = true
		if h.Parent.SpanID() != e.SpanContext.SpanID() {
			t.Errorf("handle span %d's parent is %s, want the enqueue span %s", i+1, h.Parent.SpanID(), e.SpanContext.SpanID())
		}
		if !h.Parent.IsRemote() {
			t.Errorf("handle span %d's parent should come from the message headers (remote)", i+1)
		}
		if h.SpanKind != trace.SpanKindConsumer {
			t.Errorf("handle span kind %s", h.SpanKind)
		}
		want := map[attribute.Key]attribute.Value{
			telemetry.AttrAttempt: attribute.IntValue(i + 1),
			telemetry.AttrKind:    attribute.StringValue("test.traced"),
			telemetry.AttrLane:    attribute.StringValue("work"),
			telemetry.AttrTaskID:  attribute.StringValue(id),
		}
		for k, w := range want {
			if v, ok := attr(h, k); !ok || v != w {
				t.Errorf("handle span %d: %s = %v, want %v", i+1, k, v.Emit(), w.Emit())
			}
		}
		wantCode := codes.Error
		if i == 2 {
			wantCode = codes.Ok
		}
		if h.Status.Code != wantCode {
			t.Errorf("handle span %d status %v, want %v", i+1, h.Status.Code, wantCode)
		}
	}
	for _, s := range steps {
		if !handleIDs[s.Parent.SpanID()] {
			t.Errorf("step span's parent %s is not a handle span", s.Parent.SpanID())
		}
		if v, _ := attr(s, telemetry.AttrReplayed); v.AsBool() {
			t.Error("step marked replayed without a ledger")
		}
	}
}

// TestBeforePublishKeepsLimits: trace context is not injected when the
// message already has the most headers allowed, so the message stays valid.
func TestBeforePublishKeepsLimits(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel, err := telemetry.New(&telemetry.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	bp := tel.BeforePublish()

	m := &broker.Message{Lane: "l", Kind: "k", Headers: map[string]string{}}
	for i := range broker.MaxHeaders {
		m.Headers[fmt.Sprintf("h%d", i)] = "v"
	}
	bp(context.Background(), m)
	if _, ok := m.Headers["traceparent"]; ok {
		t.Error("traceparent injected past the header limit")
	}
	if err := m.Validate(); err != nil {
		t.Errorf("message invalid after BeforePublish: %v", err)
	}

	m = &broker.Message{Lane: "l", Kind: "k"}
	bp(context.Background(), m)
	if m.Headers["traceparent"] == "" || m.ID == "" {
		t.Errorf("headers %v, ID %q: want traceparent and an ID", m.Headers, m.ID)
	}
	if err := m.Validate(); err != nil {
		t.Errorf("message invalid after BeforePublish: %v", err)
	}
	bp(context.Background(), nil) // no panic
	if n := len(exp.GetSpans()); n != 2 {
		t.Errorf("%d enqueue spans, want 2", n)
	}
}

// TestRecordErrorText: with RecordErrorText, a failed attempt's span holds
// the error message.
func TestRecordErrorText(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel, err := telemetry.New(&telemetry.Config{TracerProvider: tp, RecordErrorText: true})
	if err != nil {
		t.Fatal(err)
	}
	fail := errors.New("quota exceeded for model x")
	h := tel.Middleware()(func(ctx context.Context, job *scheduler.Job) ([]byte, error) {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			t.Error("handler context has no span")
		}
		return nil, scheduler.Permanent(fail)
	})
	job := &scheduler.Job{ID: "t1", Kind: "k", Lane: "l", Attempt: 1}
	if _, err := h(context.Background(), job); !errors.Is(err, fail) {
		t.Fatalf("middleware changed the handler's error: %v", err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Parent.IsValid() {
		t.Error("a job without trace headers should start a new trace")
	}
	if s.Status.Code != codes.Error || s.Status.Description != fail.Error() {
		t.Errorf("status %v %q, want Error %q", s.Status.Code, s.Status.Description, fail.Error())
	}
	if v, _ := attr(s, "error.type"); v.AsString() != "permanent" {
		t.Errorf("error.type = %q, want permanent", v.AsString())
	}
	if len(s.Events) != 1 || s.Events[0].Name != "exception" {
		t.Errorf("events %v, want one exception", s.Events)
	}
}

// TestMiddlewarePanic: a panicking handler's span ends with status Error and
// the panic goes on to the scheduler, which recovers it.
func TestMiddlewarePanic(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel, err := telemetry.New(&telemetry.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	h := tel.Middleware()(func(ctx context.Context, job *scheduler.Job) ([]byte, error) { panic("boom") })
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the handler's panic", r)
			}
		}()
		_, _ = h(context.Background(), &scheduler.Job{ID: "t1", Kind: "k", Lane: "l", Attempt: 1})
	}()
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Status.Code != codes.Error || spans[0].Status.Description != "panic" {
		t.Fatalf("spans %+v, want one ended with status Error panic", spans)
	}
	fams, _ := scrape(t, tel.Handler())
	expect(t, fams, 1, "switchyard_handler_duration_seconds", "kind", "k", "outcome", "panic")
	expect(t, fams, 0, "switchyard_handlers_running", "kind", "k")
}

type ledgerArgs struct {
	Doc string `json:"doc"`
}

func (ledgerArgs) Kind() string { return "test.ledgered" }

// TestTraceStepsWithLedger: with a ledger, the retry's step and effect spans
// say they were replayed from the ledger (the functions ran once), and both
// attempts are in the enqueue's trace.
func TestTraceStepsWithLedger(t *testing.T) {
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })

	b := openBroker(t)
	tel, err := telemetry.New(&telemetry.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ccfg := &switchyard.ClientConfig{Ledger: L}
	tel.InstrumentClient(ccfg)
	client, err := switchyard.NewClient(b, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	scfg, done := fastServer("work")
	scfg.Ledger = L
	tel.Instrument(scfg)
	srv, err := switchyard.NewServer(b, scfg)
	if err != nil {
		t.Fatal(err)
	}
	var stepCalls, effectCalls atomic.Int32
	must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[ledgerArgs]) error {
		if _, err := telemetry.Step(ctx, "summarize", func(ctx context.Context) (string, error) {
			stepCalls.Add(1)
			return "summary", nil
		}); err != nil {
			return err
		}
		if _, err := telemetry.Effect(ctx, "notify", func(ctx context.Context) (bool, error) {
			effectCalls.Add(1)
			return true, nil
		}, nil); err != nil {
			return err
		}
		if tk.Attempt == 1 {
			return errors.New("fails after the effect")
		}
		return nil
	}, nil))
	id := enqueue(t, client, ledgerArgs{Doc: "d1"}, &switchyard.EnqueueOpts{Lane: "work"})
	must(t, srv.Start(ctx))
	if ev := waitEvents(t, done, 1); ev[0].Type != "succeeded" || ev[0].Attempt != 2 {
		t.Fatalf("task ended with %s on attempt %d, want succeeded on 2", ev[0].Type, ev[0].Attempt)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	must(t, srv.Stop(stopCtx))
	if stepCalls.Load() != 1 || effectCalls.Load() != 1 {
		t.Fatalf("step ran %d times, effect %d; want once each", stepCalls.Load(), effectCalls.Load())
	}

	byName := map[string][]tracetest.SpanStub{}
	traces := map[trace.TraceID]bool{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = append(byName[s.Name], s)
		traces[s.SpanContext.TraceID()] = true
	}
	if len(traces) != 1 {
		t.Errorf("spans in %d traces, want 1", len(traces))
	}
	if len(byName["enqueue test.ledgered"]) != 1 || len(byName["handle test.ledgered"]) != 2 {
		t.Fatalf("spans: %v", byName)
	}
	if v, _ := attr(byName["enqueue test.ledgered"][0], telemetry.AttrTaskID); v.AsString() != id {
		t.Errorf("enqueue span names task %q, want %q", v.AsString(), id)
	}
	handleAttempt := map[trace.SpanID]int64{}
	for _, h := range byName["handle test.ledgered"] {
		v, _ := attr(h, telemetry.AttrAttempt)
		handleAttempt[h.SpanContext.SpanID()] = v.AsInt64()
	}
	for _, name := range []string{"step summarize", "effect notify"} {
		spans := byName[name]
		if len(spans) != 2 {
			t.Errorf("%d %q spans, want 2", len(spans), name)
			continue
		}
		for _, s := range spans {
			attempt, ok := handleAttempt[s.Parent.SpanID()]
			if !ok {
				t.Errorf("%q span is not a child of a handle span", name)
			}
			replayed, _ := attr(s, telemetry.AttrReplayed)
			if want := attempt == 2; replayed.AsBool() != want {
				t.Errorf("%q span in attempt %d: replayed=%v, want %v", name, attempt, replayed.AsBool(), want)
			}
		}
	}
}

// TestTracingOffAndBadHeaders: with the default (no-op) tracer provider no
// headers are added; a garbled traceparent starts a fresh trace.
func TestTracingOffAndBadHeaders(t *testing.T) {
	off, err := telemetry.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &broker.Message{Lane: "l", Kind: "k"}
	off.BeforePublish()(context.Background(), m)
	if len(m.Headers) != 0 {
		t.Errorf("headers %v added with tracing off", m.Headers)
	}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel, err := telemetry.New(&telemetry.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	h := tel.Middleware()(func(ctx context.Context, job *scheduler.Job) ([]byte, error) { return []byte("r"), nil })
	job := &scheduler.Job{ID: "t1", Kind: "k", Lane: "l", Attempt: 1, Headers: map[string]string{"traceparent": "00-zz-garbage"}}
	if res, err := h(context.Background(), job); err != nil || string(res) != "r" {
		t.Fatalf("middleware returned %q, %v", res, err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Parent.IsValid() || !spans[0].SpanContext.IsValid() || spans[0].Status.Code != codes.Ok {
		t.Fatalf("spans %+v, want one new root span with status Ok", spans)
	}
}
