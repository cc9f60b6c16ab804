package switchyard_test

import (
	"context"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
)

type answerArgs struct {
	Question string `json:"question"`
}

func (answerArgs) Kind() string { return "example.answer" }

// A handler's result comes back through Client.Wait; a running task
// cancelled with Client.Cancel has its handler's context cancelled and
// ends cancelled, without a retry.
func ExampleClient_Wait() {
	ctx := context.Background()
	L, _ := ledger.Open(ctx, "sqlite::memory:")
	defer L.Close()
	b, _ := broker.Open(ctx, "mem://example-wait", &broker.Options{Dedup: L})
	defer b.Close()
	client, _ := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond})

	stopped := make(chan struct{})
	switchyard.RegisterWithResult(srv, func(ctx context.Context, t *switchyard.Task[answerArgs]) (string, error) {
		if t.Args.Question == "think forever" {
			<-ctx.Done() // a long model call, stopped by the cancel
			fmt.Println("handler stopped by the cancel:", switchyard.CancelCause(ctx))
			close(stopped)
			return "", ctx.Err()
		}
		return "42", nil
	}, nil)
	srv.Start(ctx)
	defer srv.Stop(ctx)

	r, _ := client.Enqueue(ctx, answerArgs{Question: "the answer"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	res, _ := client.Wait(ctx, r.ID)
	var answer string
	res.Decode(&answer)
	fmt.Println(res.State, answer)

	long, _ := client.Enqueue(ctx, answerArgs{Question: "think forever"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	for { // until it runs
		if t, _ := L.Get(ctx, long.ID); t.State == ledger.Running {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	client.Cancel(ctx, long.ID, "the user closed the tab")
	res, _ = client.Wait(ctx, long.ID) // the ledger says cancelled at once
	<-stopped                          // the handler hears of it within the notes' interval
	fmt.Println(res.State, res.Error)
	// Output:
	// completed 42
	// handler stopped by the cancel: true
	// cancelled cancelled: the user closed the tab
}
