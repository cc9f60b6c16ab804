package cacheroute_test

import (
	"fmt"

	"github.com/switchyard-dev/switchyard/cacheroute"
	"github.com/switchyard-dev/switchyard/spend"
)

// A worker routes each model call to the replica that holds its prompt
// prefix: the key's home while it has a free slot, the key's next replica
// when it is full.
func Example() {
	r, _ := cacheroute.New([]string{"vllm-0", "vllm-1", "vllm-2"}, 1)
	order := r.Order("support-policy-v3")
	first, release, _ := r.Acquire("support-policy-v3") // the home
	second, _, _ := r.Acquire("support-policy-v3")      // the home is full: the next in the key's order
	fmt.Println(first == order[0], second == order[1])
	release()
	again, _, _ := r.Acquire("support-policy-v3") // home again
	fmt.Println(again == order[0])

	// After each call, the usage the provider reported:
	_ = r.Record("support-policy-v3", spend.Usage{Input: 40, CachedInput: 460, Output: 16})
	for _, s := range r.Shares() {
		fmt.Printf("%s: %d call, %.0f%% of input cached\n", s.Key, s.Calls, 100*s.Cached)
	}
	// Output:
	// true true
	// true
	// support-policy-v3: 1 call, 92% of input cached
}
