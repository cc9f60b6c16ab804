package urlq

import (
	"testing"
	"time"
)

func TestQuery(t *testing.T) {
	q := New()
	q.Str("a", "x")
	q.Str("empty", "")
	q.Dur("d", 1500*time.Millisecond)
	q.Dur("zero", 0)
	q.Int("n", -3)
	q.Int("nz", 0)
	q.Bool("t", true)
	q.Bool("f", false)
	if got, want := q.Encode(), "a=x&d=1.5s&n=-3&t=true"; got != want {
		t.Errorf("Encode() = %q, want %q", got, want)
	}
}
