package lanes

import (
	"strings"
	"testing"
)

// drain pops everything and returns the keys in pop order.
func drain(f *Fair[int]) string {
	var b strings.Builder
	for {
		_, k, ok := f.Pop()
		if !ok {
			return b.String()
		}
		b.WriteString(k)
	}
}

func TestFair_RoundRobin(t *testing.T) {
	t.Parallel()
	var f Fair[int]
	for i := range 5 {
		f.Push("a", i)
	}
	f.Push("b", 100)
	f.Push("b", 101)
	f.Push("c", 200)
	if f.Len() != 8 || f.Keys() != 3 || f.Queued("a") != 5 || f.Queued("z") != 0 {
		t.Fatalf("Len %d Keys %d Queued(a) %d", f.Len(), f.Keys(), f.Queued("a"))
	}
	if got, want := drain(&f), "abcabaaa"; got != want {
		t.Fatalf("order %q, want %q", got, want)
	}
	if f.Len() != 0 || f.Keys() != 0 {
		t.Fatalf("after drain: Len %d Keys %d", f.Len(), f.Keys())
	}
}

func TestFair_FIFOWithinKey(t *testing.T) {
	t.Parallel()
	var f Fair[int]
	for i := range 200 {
		f.Push([]string{"x", "y"}[i%2], i)
	}
	last := map[string]int{"x": -1, "y": -1}
	for {
		v, k, ok := f.Pop()
		if !ok {
			break
		}
		if v <= last[k] {
			t.Fatalf("key %s: %d after %d", k, v, last[k])
		}
		last[k] = v
	}
}

func TestFair_Weighted(t *testing.T) {
	t.Parallel()
	var f Fair[int]
	f.SetWeight("a", 3)
	f.SetWeight("b", 0) // below 1 means 1
	for i := range 6 {
		f.Push("a", i)
		f.Push("b", i)
	}
	if got, want := drain(&f), "aaabaaabbbbb"; got != want {
		t.Fatalf("order %q, want %q", got, want)
	}
}

func TestFair_NewKeyJoinsEndOfRound(t *testing.T) {
	t.Parallel()
	var f Fair[int]
	f.Push("a", 1)
	f.Push("a", 2)
	f.Push("b", 1)
	if _, k, _ := f.Pop(); k != "a" {
		t.Fatalf("first pop %q, want a", k)
	}
	// b is next; c, arriving now, comes after every key already waiting.
	f.Push("c", 1)
	if got, want := drain(&f), "bac"; got != want {
		t.Fatalf("order %q, want %q", got, want)
	}
	// A drained key that comes back joins again.
	f.Push("a", 3)
	if v, k, ok := f.Pop(); !ok || k != "a" || v != 3 {
		t.Fatalf("Pop = %d, %q, %v", v, k, ok)
	}
}

func TestFair_EmptyPop(t *testing.T) {
	t.Parallel()
	var f Fair[string]
	if v, k, ok := f.Pop(); ok || v != "" || k != "" {
		t.Fatalf("Pop on empty = %q, %q, %v", v, k, ok)
	}
}

// TestFair_FloodDoesNotStarve: a quiet key's items come out one per round
// however many items the noisy key queued first.
func TestFair_FloodDoesNotStarve(t *testing.T) {
	t.Parallel()
	var f Fair[int]
	for i := range 10000 {
		f.Push("noisy", i)
	}
	for i := range 100 {
		f.Push("quiet", i)
	}
	for pops := 1; ; pops++ {
		v, k, _ := f.Pop()
		if k == "quiet" && v == 99 {
			if pops != 200 {
				t.Fatalf("the 100th quiet item came out at pop %d, want 200", pops)
			}
			return
		}
	}
}
