package switchyard_test

import (
	"context"
	"fmt"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
)

// Enqueue a batch in one call: each item gets its own result, an invalid
// item fails alone, and an item repeating an earlier one's idempotency key
// is a duplicate of it.
func ExampleClient_EnqueueMany() {
	ctx := context.Background()
	b, _ := broker.Open(ctx, "mem://example-many", nil)
	defer b.Close()
	client, _ := switchyard.NewClient(b, nil)

	rs, err := client.EnqueueMany(ctx, []switchyard.EnqueueItem{
		{Args: greetArgs{Name: "Ada"}, Opts: &switchyard.EnqueueOpts{IdempotencyKey: "greet-ada"}},
		{Args: greetArgs{Name: "Grace"}, Opts: &switchyard.EnqueueOpts{Lane: "not a lane"}},
		{Args: greetArgs{Name: "Ada again"}, Opts: &switchyard.EnqueueOpts{IdempotencyKey: "greet-ada"}},
	})
	if err != nil {
		fmt.Println("the batch failed:", err)
		return
	}
	for i, r := range rs {
		switch {
		case r.Err != nil:
			fmt.Printf("item %d: refused\n", i)
		case r.Duplicate:
			fmt.Printf("item %d: duplicate of item 0: %v\n", i, r.ID == rs[0].ID)
		default:
			fmt.Printf("item %d: enqueued\n", i)
		}
	}
	// Output:
	// item 0: enqueued
	// item 1: refused
	// item 2: duplicate of item 0: true
}
