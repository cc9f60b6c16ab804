package scheduler

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestNthDuration(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		n := 1 + r.IntN(durWindow)
		a := make([]time.Duration, n)
		for i := range a {
			switch round % 4 {
			case 0:
				a[i] = time.Duration(r.IntN(5)) // many equal
			case 1:
				a[i] = time.Duration(i) // sorted
			case 2:
				a[i] = time.Duration(n - i) // reversed
			default:
				a[i] = time.Duration(r.Int64())
			}
		}
		sorted := slices.Clone(a)
		slices.Sort(sorted)
		k := r.IntN(n)
		if got := nthDuration(slices.Clone(a), k); got != sorted[k] {
			t.Fatalf("n %d k %d: got %d, want %d", n, k, got, sorted[k])
		}
	}
}
