package telemetry_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/telemetry"
)

// BenchmarkPerTask measures what telemetry adds to one task: BeforePublish,
// the middleware around a no-op handler, and the started and succeeded
// events. "noop" uses the default tracer provider (tracing off); "sdk" an
// SDK provider that samples every span and exports none.
func BenchmarkPerTask(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  *telemetry.Config
	}{
		{"noop", &telemetry.Config{}},
		{"sdk", &telemetry.Config{TracerProvider: sdktrace.NewTracerProvider()}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tel, err := telemetry.New(tc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			bp, obs := tel.BeforePublish(), tel.Observer()
			h := tel.Middleware()(func(ctx context.Context, job *scheduler.Job) ([]byte, error) { return nil, nil })
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				m := &broker.Message{Lane: "work", Kind: "k"}
				bp(ctx, m)
				job := &scheduler.Job{ID: m.ID, Kind: m.Kind, Lane: m.Lane, Headers: m.Headers, Attempt: 1}
				obs(scheduler.Event{Type: scheduler.EventStarted, Kind: job.Kind, Lane: job.Lane})
				_, _ = h(ctx, job)
				obs(scheduler.Event{Type: scheduler.EventSucceeded, Kind: job.Kind, Lane: job.Lane})
			}
		})
	}
}
