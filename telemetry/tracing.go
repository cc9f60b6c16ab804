package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Span attribute keys. IDs, kinds, lanes and attempt numbers go on spans;
// arguments, results and headers never do.
const (
	AttrKind     = attribute.Key("switchyard.task.kind")
	AttrLane     = attribute.Key("switchyard.lane")
	AttrTaskID   = attribute.Key("switchyard.task.id")
	AttrAttempt  = attribute.Key("switchyard.attempt")
	AttrTenant   = attribute.Key("switchyard.tenant")
	AttrStep     = attribute.Key("switchyard.step.name")
	AttrEffect   = attribute.Key("switchyard.effect.key")
	AttrReplayed = attribute.Key("switchyard.replayed")

	attrMsgSystem = attribute.Key("messaging.system")
	attrMsgOp     = attribute.Key("messaging.operation.type")
	attrMsgDest   = attribute.Key("messaging.destination.name")
	attrMsgID     = attribute.Key("messaging.message.id")
	attrErrorType = attribute.Key("error.type")
)

// Span names: "enqueue <kind>", "handle <kind>", "step <name>", "effect <key>".
const (
	SpanEnqueue = "enqueue"
	SpanHandle  = "handle"
	SpanStep    = "step"
	SpanEffect  = "effect"
)

// beforePublish records the enqueue span and injects its context into the
// message headers. It assigns the message's ID when it has none yet (Publish
// keeps an ID that is set), so the span can name the task.
func (t *Telemetry) beforePublish(ctx context.Context, m *broker.Message) {
	if m == nil {
		return
	}
	if m.ID == "" {
		m.ID = broker.NewID()
	}
	attrs := []attribute.KeyValue{attrMsgSystem.String("switchyard"), attrMsgOp.String("send"),
		attrMsgDest.String(m.Lane), attrMsgID.String(m.ID), AttrKind.String(m.Kind), AttrLane.String(m.Lane), AttrTaskID.String(m.ID)}
	if m.Tenant != "" {
		attrs = append(attrs, AttrTenant.String(m.Tenant))
	}
	// The hook runs just before the publish and nothing runs after it, so
	// the span marks the moment of enqueue rather than timing the publish.
	sctx, span := t.tracer.Start(ctx, SpanEnqueue+" "+m.Kind, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	defer span.End()

	carrier := propagation.MapCarrier{}
	t.prop.Inject(sctx, carrier)
	// Headers were validated before this hook: keep them within the limits
	// so injecting trace context can never make a valid message invalid.
	for k, v := range carrier {
		if _, exists := m.Headers[k]; !exists && len(m.Headers) >= broker.MaxHeaders {
			continue
		}
		if len(k) > broker.MaxNameLen || len(v) > broker.MaxHeaderLen {
			continue
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[k] = v
	}
}

// traceMiddleware starts a handle span per attempt as a child of the trace
// context found in the task's headers, so every attempt of a task (and a
// replay of it) lands in the trace of its enqueue.
func (t *Telemetry) traceMiddleware() scheduler.Middleware {
	return func(next scheduler.HandlerFunc) scheduler.HandlerFunc {
		return func(ctx context.Context, job *scheduler.Job) (res []byte, err error) {
			if len(job.Headers) > 0 {
				ctx = t.prop.Extract(ctx, propagation.MapCarrier(job.Headers))
			}
			attrs := []attribute.KeyValue{attrMsgSystem.String("switchyard"), attrMsgOp.String("process"),
				attrMsgDest.String(job.Lane), attrMsgID.String(job.ID), AttrKind.String(job.Kind), AttrLane.String(job.Lane),
				AttrTaskID.String(job.ID), AttrAttempt.Int(job.Attempt)}
			if job.Tenant != "" {
				attrs = append(attrs, AttrTenant.String(job.Tenant))
			}
			ctx, span := t.tracer.Start(ctx, SpanHandle+" "+job.Kind, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
			panicked := true
			defer func() {
				if panicked {
					// The scheduler recovers the panic and records its stack.
					span.SetStatus(codes.Error, "panic")
					span.SetAttributes(attrErrorType.String("panic"))
				}
				span.End()
			}()
			res, err = next(ctx, job)
			panicked = false
			if err != nil {
				t.recordError(span, err)
			} else {
				span.SetStatus(codes.Ok, "")
			}
			return res, err
		}
	}
}

// recordError marks span failed with err's type, and its text only when
// Config.RecordErrorText allows.
func (t *Telemetry) recordError(span trace.Span, err error) {
	typ := fmt.Sprintf("%T", err)
	if scheduler.IsPermanent(err) {
		typ = "permanent"
	}
	span.SetAttributes(attrErrorType.String(typ))
	if t.cfg.RecordErrorText {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return
	}
	span.SetStatus(codes.Error, typ)
}

// Step is switchyard.Step inside a span "step <name>", a child of the
// handle span in ctx. The span's attribute switchyard.replayed is true when
// the step's output came from the ledger and fn was not called. Without a
// span in ctx (no telemetry middleware) it is exactly switchyard.Step.
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return switchyard.Step(ctx, name, fn)
	}
	ctx, span := parent.TracerProvider().Tracer(instrumentationName).Start(ctx, SpanStep+" "+name,
		trace.WithAttributes(AttrStep.String(name)))
	defer span.End()
	called := false
	out, err := switchyard.Step(ctx, name, func(ctx context.Context) (T, error) {
		called = true
		return fn(ctx)
	})
	span.SetAttributes(AttrReplayed.Bool(!called))
	endSpan(span, err)
	return out, err
}

// Effect is switchyard.Effect inside a span "effect <key>", a child of the
// handle span in ctx; switchyard.replayed is true when the effect was
// already confirmed (or reconciled) and do was not called. Without a span
// in ctx it is exactly switchyard.Effect.
func Effect[T any](ctx context.Context, key string, do func(ctx context.Context) (T, error), opts *switchyard.EffectOpts) (T, error) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return switchyard.Effect(ctx, key, do, opts)
	}
	ctx, span := parent.TracerProvider().Tracer(instrumentationName).Start(ctx, SpanEffect+" "+key,
		trace.WithAttributes(AttrEffect.String(key)))
	defer span.End()
	called := false
	out, err := switchyard.Effect(ctx, key, func(ctx context.Context) (T, error) {
		called = true
		return do(ctx)
	}, opts)
	span.SetAttributes(AttrReplayed.Bool(!called))
	endSpan(span, err)
	return out, err
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetAttributes(attrErrorType.String(fmt.Sprintf("%T", err)))
		span.SetStatus(codes.Error, "failed")
		return
	}
	span.SetStatus(codes.Ok, "")
}
