package lanes

import (
	"flag"
	"os"
	"testing"
)

// TestMain runs fewer property checks under the race detector (which makes
// the simulations some 20× slower on a shared machine) unless
// -rapid.checks is given: the race run is about concurrency, which this
// package has none of beyond a mutex; the plain run does the full 100.
func TestMain(m *testing.M) {
	flag.Parse()
	if raceEnabled {
		set := false
		flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
		if !set {
			if err := flag.Set("rapid.checks", "25"); err != nil {
				panic(err)
			}
		}
	}
	os.Exit(m.Run())
}
