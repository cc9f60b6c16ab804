// Pipeline is the first thing to read: an AI document pipeline — ingest →
// chunk → embed → summarize → sync — on Switchyard's embedded broker, with a
// ledger so that retries never pay for a model call twice and the final
// write to another system happens exactly once.
//
//	go run ./examples/pipeline
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/embedded" // embedded:// and mem://
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite" // sqlite://
)

// Task arguments: small, JSON-encoded, with a stable kind.
type Ingest struct{ Doc string }
type Embed struct {
	Doc       string
	Chunk, Of int
}
type Summarize struct{ Doc string }
type Sync struct{ Doc, Summary string }

func (Ingest) Kind() string    { return "pipeline.ingest" }
func (Embed) Kind() string     { return "pipeline.embed" }
func (Summarize) Kind() string { return "pipeline.summarize" }
func (Sync) Kind() string      { return "pipeline.sync" }

// callModel stands in for an LLM: slow, and overloaded one time in five.
func callModel(ctx context.Context, what string) (string, error) {
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(time.Duration(10+rand.IntN(20)) * time.Millisecond):
	}
	if rand.IntN(5) == 0 {
		return "", errors.New("model: 503 overloaded") // retried with backoff
	}
	return "result of " + what, nil
}

func main() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "switchyard-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The ledger records tasks, steps and effects; the broker carries work.
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer L.Close()
	b, err := broker.Open(ctx, "embedded://"+filepath.Join(dir, "queue.db"), &broker.Options{Dedup: L})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	client, _ := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}

	const chunks = 4
	var (
		mu       sync.Mutex
		embedded = map[string]int{}
		writes   atomic.Int32
		synced   = make(chan string, 16)
	)
	switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[Ingest]) error {
		for i := 0; i < chunks; i++ {
			// Idempotency keys make a retried ingest enqueue nothing twice.
			key := fmt.Sprintf("embed/%s/%d", t.Args.Doc, i)
			if _, err := client.Enqueue(ctx, Embed{Doc: t.Args.Doc, Chunk: i, Of: chunks}, &switchyard.EnqueueOpts{Lane: t.Lane, IdempotencyKey: key}); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[Embed]) error {
		// Step memoises the model's answer: a retry does not call it again.
		if _, err := switchyard.Step(ctx, "embed", func(ctx context.Context) (string, error) {
			return callModel(ctx, "embedding")
		}); err != nil {
			return err
		}
		mu.Lock()
		embedded[t.Args.Doc]++
		last := embedded[t.Args.Doc] == t.Args.Of
		mu.Unlock()
		if last {
			_, err := client.Enqueue(ctx, Summarize{Doc: t.Args.Doc}, &switchyard.EnqueueOpts{Lane: t.Lane, IdempotencyKey: "summarize/" + t.Args.Doc})
			return err
		}
		return nil
	}, nil)
	switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[Summarize]) error {
		summary, err := switchyard.Step(ctx, "summarize", func(ctx context.Context) (string, error) {
			return callModel(ctx, "summary")
		})
		if err != nil {
			return err
		}
		_, err = client.Enqueue(ctx, Sync{Doc: t.Args.Doc, Summary: summary}, &switchyard.EnqueueOpts{Lane: t.Lane, IdempotencyKey: "sync/" + t.Args.Doc})
		return err
	}, nil)
	switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[Sync]) error {
		// Effect: recorded before and after, never repeated once confirmed.
		_, err := switchyard.Effect(ctx, "crm/"+t.Args.Doc, func(ctx context.Context) (bool, error) {
			writes.Add(1)
			return true, nil
		}, nil)
		if err == nil {
			synced <- t.Args.Doc
		}
		return err
	}, nil)

	if err := srv.Start(ctx); err != nil {
		log.Fatal(err)
	}
	docs := []string{"q3-report.pdf", "contract.pdf", "notes.md"}
	for _, d := range docs {
		lane := "batch"
		if d == "contract.pdf" {
			lane = "interactive" // a user is waiting for this one
		}
		if _, err := client.Enqueue(ctx, Ingest{Doc: d}, &switchyard.EnqueueOpts{Lane: lane, IdempotencyKey: "ingest/" + d}); err != nil {
			log.Fatal(err)
		}
	}
	for range docs {
		select {
		case d := <-synced:
			fmt.Println("synced", d)
		case <-time.After(time.Minute):
			log.Fatal("pipeline did not finish within a minute")
		}
	}
	if err := srv.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d documents, %d CRM writes (exactly one each)\n", len(docs), writes.Load())
}
