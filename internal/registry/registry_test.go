package registry

import (
	"slices"
	"testing"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := New[func() int]("test")
	r.Register("B", func() int { return 2 })
	r.Register("a", func() int { return 1 })
	if got := r.Schemes(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Schemes = %v", got)
	}
	if o, ok := r.Lookup("b"); !ok || o() != 2 {
		t.Error("Lookup(b) misses the opener registered as B")
	}
	if _, ok := r.Lookup("c"); ok {
		t.Error("Lookup(c) found an opener")
	}
	defer func() {
		if p := recover(); p != "test: scheme registered twice: a" {
			t.Errorf("a second Register panics with %v", p)
		}
	}()
	r.Register("A", func() int { return 3 })
}
