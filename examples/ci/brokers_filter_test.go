package ci_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// SWITCHYARD_EXAMPLE_BROKERS, a comma-separated list of the names in
// brokers, narrows TestConformance to those brokers. Switchyard's own CI
// sets it: every adapter's package runs the whole suite against its broker
// already, so running it here again for each broker would only repeat that
// work. A user's copy of this example has no need of it.
const exampleBrokersEnv = "SWITCHYARD_EXAMPLE_BROKERS"

var exampleBrokersErr error // a name in the variable that brokers lacks

func init() {
	v := os.Getenv(exampleBrokersEnv)
	if v == "" {
		return
	}
	var names []string
	for _, b := range brokers {
		names = append(names, b.name)
	}
	want := strings.Split(v, ",")
	for _, w := range want {
		if !slices.Contains(names, w) {
			exampleBrokersErr = fmt.Errorf("%s=%q names %q, which is not one of %v", exampleBrokersEnv, v, w, names)
			return
		}
	}
	kept := brokers[:0]
	for _, b := range brokers {
		if slices.Contains(want, b.name) {
			kept = append(kept, b)
		}
	}
	brokers = kept
}

// TestExampleBrokers fails when SWITCHYARD_EXAMPLE_BROKERS names a broker
// the example does not have, rather than quietly running fewer.
func TestExampleBrokers(t *testing.T) {
	if exampleBrokersErr != nil {
		t.Fatal(exampleBrokersErr)
	}
}
