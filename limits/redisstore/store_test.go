package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/limits/limitstest"
	"github.com/switchyard-dev/switchyard/limits/redisstore"
)

// newStore returns a store under a prefix unique to this test, and deletes
// its keys when the test ends.
func newStore(t testing.TB, now func() time.Time) *redisstore.Store {
	t.Helper()
	addr := testenv.Redis.Endpoint(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "switchyard-test:limits:" + strings.NewReplacer("/", ":", " ", "_").Replace(t.Name()) + ":" + hex.EncodeToString(b[:]) + ":"
	s, err := redisstore.New(c, &redisstore.Options{Prefix: prefix, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.DeleteAll(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		_ = c.Close()
	})
	return s
}

func TestStore_Conformance(t *testing.T) {
	t.Parallel()
	limitstest.Run(t, func(t *testing.T, now func() time.Time) (limits.Store, limits.UsageStore) {
		s := newStore(t, now)
		return s, s
	})
}

// With no injected clock the scripts use Redis TIME.
func TestStore_ServerTime(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	l, err := limits.New(limits.Config{Store: s, Rules: []limits.Rule{{Name: "r", Limit: limits.Limit{Requests: 2, Interval: time.Second}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := l.Reserve(ctx, limits.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = l.Reserve(ctx, limits.Request{})
	var we *limits.WaitError
	if !errors.As(err, &we) || we.Wait <= 0 || we.Wait > 500*time.Millisecond {
		t.Fatalf("third call in a 2/s limit: %v, want a wait in (0, 500ms]", err)
	}
	time.Sleep(we.Wait)
	if _, err := l.Reserve(ctx, limits.Request{}); err != nil {
		t.Fatalf("after waiting as told: %v", err)
	}
}

func TestStore_UnreachableIsTransient(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	s, err := redisstore.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Take(context.Background(), []limits.Take{{Bucket: limits.Bucket{Name: "x", Capacity: 1, Rate: 1}, N: 1}})
	if !errors.Is(err, broker.ErrTransient) {
		t.Fatalf("Take on a closed port: %v, want a transient error", err)
	}
	if !strings.Contains(err.Error(), "redisstore") {
		t.Fatalf("error does not say where it came from: %v", err)
	}
}

func BenchmarkStore_Reserve(b *testing.B) {
	s := newStore(b, nil)
	l, err := limits.New(limits.Config{Store: s, Rules: []limits.Rule{{Name: "bench", By: []limits.Field{limits.Model},
		Limit: limits.Limit{Requests: 1 << 40, Tokens: 1 << 50, Interval: time.Second}}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := limits.Request{Key: limits.Key{Model: "m"}, Tokens: 100}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.Reserve(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStore_ReserveParallel(b *testing.B) {
	s := newStore(b, nil)
	l, err := limits.New(limits.Config{Store: s, Rules: []limits.Rule{{Name: "bench", By: []limits.Field{limits.Model},
		Limit: limits.Limit{Requests: 1 << 40, Tokens: 1 << 50, Interval: time.Second}}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := limits.Request{Key: limits.Key{Model: "m"}, Tokens: 100}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Reserve(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
