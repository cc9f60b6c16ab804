package switchyard_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

type chatReply struct {
	Prompt string `json:"prompt"`
}

func (chatReply) Kind() string { return "example.reply" }

// A handler streams its output; a watcher follows the task's state
// changes, progress and chunks in order (resuming from ev.Offset after a
// reconnect).
func ExampleClient_Watch() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "switchyard-example-watch-")
	defer os.RemoveAll(dir)
	L, _ := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "ledger.db"))
	defer L.Close()
	b, _ := broker.Open(ctx, "mem://example-watch", &broker.Options{Dedup: L})
	defer b.Close()
	client, _ := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond})
	switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[chatReply]) error {
		switchyard.Progress(ctx, 0.5, "thinking")
		for _, tok := range []string{"Hello", ", ", "Ada"} {
			if err := switchyard.Emit(ctx, []byte(tok)); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	srv.Start(ctx)
	defer srv.Stop(ctx)

	res, _ := client.Enqueue(ctx, chatReply{Prompt: "greet Ada"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	for ev, err := range client.Watch(ctx, res.ID, 0, nil) {
		if err != nil {
			fmt.Println(err)
			return
		}
		switch ev.Kind {
		case ledger.StreamState:
			fmt.Println("state:", ev.State)
		case ledger.StreamProgress:
			fmt.Printf("progress: %.0f%% %s\n", ev.Fraction*100, ev.Message)
		case ledger.StreamChunk:
			fmt.Printf("chunk: %q\n", ev.Data)
		}
	}
	// Output:
	// state: queued
	// state: running
	// progress: 50% thinking
	// chunk: "Hello"
	// chunk: ", "
	// chunk: "Ada"
	// state: completed
}
