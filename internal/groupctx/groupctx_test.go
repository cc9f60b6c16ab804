package groupctx

import (
	"context"
	"testing"
	"time"
)

type key struct{}

func TestAny(t *testing.T) {
	a, cancelA := context.WithCancel(context.WithValue(context.Background(), key{}, "a"))
	b, cancelB := context.WithCancel(context.Background())
	ctx, release := Any(a, b)
	defer release()
	if v := ctx.Value(key{}); v != "a" {
		t.Fatalf("value %v, want the first context's", v)
	}
	cancelA()
	select {
	case <-ctx.Done():
		t.Fatal("done while one caller still waits")
	case <-time.After(20 * time.Millisecond):
	}
	cancelB()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not done after every caller gave up")
	}
}

func TestAny_Release(t *testing.T) {
	ctx, release := Any(context.Background())
	release()
	select {
	case <-ctx.Done():
	default:
		t.Fatal("not done after release")
	}
}

func TestAny_OneNeverEnds(t *testing.T) {
	a, cancelA := context.WithCancel(context.Background())
	ctx, release := Any(a, context.Background())
	cancelA()
	select {
	case <-ctx.Done():
		t.Fatal("done while a caller whose context never ends still waits")
	case <-time.After(20 * time.Millisecond):
	}
	release()
	select {
	case <-ctx.Done():
	default:
		t.Fatal("not done after release")
	}
}
