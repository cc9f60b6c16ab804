package switchyard_test

import (
	"context"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type greetArgs struct {
	Name string `json:"name"`
}

func (greetArgs) Kind() string { return "example.greet" }

// Enqueue a typed task on the in-process broker and run it.
func Example() {
	ctx := context.Background()
	b, _ := broker.Open(ctx, "mem://example", nil)
	defer b.Close()
	client, _ := switchyard.NewClient(b, nil)
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{PollWait: 50 * time.Millisecond})

	done := make(chan struct{})
	switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[greetArgs]) error {
		fmt.Printf("hello, %s (attempt %d on lane %s)\n", t.Args.Name, t.Attempt, t.Lane)
		close(done)
		return nil
	}, nil)
	srv.Start(ctx)
	defer srv.Stop(ctx)

	client.Enqueue(ctx, greetArgs{Name: "Ada"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	<-done
	// Output: hello, Ada (attempt 1 on lane interactive)
}

// A failing model call is retried; Step keeps a finished step's output
// across attempts (with a ledger, across processes and crashes too).
func ExampleStep() {
	ctx := context.Background()
	b, _ := broker.Open(ctx, "mem://example-step", nil)
	defer b.Close()
	client, _ := switchyard.NewClient(b, nil)
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{PollWait: 50 * time.Millisecond,
		Retry: switchyardRetry()})

	done := make(chan struct{})
	switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[greetArgs]) error {
		out, err := switchyard.Step(ctx, "draft", func(ctx context.Context) (string, error) {
			if t.Attempt == 1 {
				return "", fmt.Errorf("model overloaded")
			}
			return "Dear " + t.Args.Name, nil
		})
		if err != nil {
			fmt.Println("attempt", t.Attempt, "failed:", err)
			return err
		}
		fmt.Println("attempt", t.Attempt, "drafted:", out)
		close(done)
		return nil
	}, nil)
	srv.Start(ctx)
	defer srv.Stop(ctx)
	client.Enqueue(ctx, greetArgs{Name: "Grace"}, nil)
	<-done
	// Output:
	// attempt 1 failed: model overloaded
	// attempt 2 drafted: Dear Grace
}

func switchyardRetry() scheduler.RetryPolicy {
	return scheduler.RetryPolicy{Base: 10 * time.Millisecond, Jitter: scheduler.NoJitter}
}
