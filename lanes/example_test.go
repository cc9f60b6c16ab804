package lanes_test

import (
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/lanes"
)

// A slot frees up while a batch backlog has the shared slots and a user's
// task arrives: interactive gets its reserved slot at once. Three seconds
// later the batch lane has waited past its promotion age and gets the next
// shared slot ahead of more interactive work.
func ExamplePolicy_Next() {
	p, err := lanes.NewPolicy(8, lanes.Defaults()) // 2 + 1 reserved, 5 shared
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	states := []lanes.LaneState{
		{Name: lanes.Interactive, Running: 0, Waiting: true, OldestReady: now},
		{Name: lanes.Batch, Running: 5, Waiting: true, OldestReady: now.Add(-time.Minute)},
	}
	lane, ok := p.Next(now, states)
	fmt.Println(lane, ok)

	// Later: interactive is using its 2 reserved slots and wants more; a
	// shared slot is free.
	now = now.Add(3 * time.Second)
	states[0] = lanes.LaneState{Name: lanes.Interactive, Running: 2, Waiting: true, OldestReady: now}
	states[1].Running = 4
	lane, ok = p.Next(now, states)
	fmt.Println(lane, ok)

	// Nothing waiting: nothing to start.
	lane, ok = p.Next(now, nil)
	fmt.Printf("%q %v\n", lane, ok)
	// Output:
	// interactive true
	// batch true
	// "" false
}

// One tenant's flood does not hold up another's tasks.
func ExampleFair() {
	var q lanes.Fair[string]
	for i := range 4 {
		q.Push("acme", fmt.Sprintf("acme-%d", i))
	}
	q.Push("globex", "globex-0")
	q.Push("globex", "globex-1")
	for q.Len() > 0 {
		item, _, _ := q.Pop()
		fmt.Print(item, " ")
	}
	fmt.Println()
	// Output:
	// acme-0 globex-0 acme-1 globex-1 acme-2 acme-3
}
