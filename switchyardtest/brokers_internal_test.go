package switchyardtest

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

// The registry and the environment path without any broker: a closed port,
// a missing container module, a registered starter used once.
func TestLookup_Paths(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	t.Setenv("SWITCHYARD_REDIS_ADDR", closed)
	if ep, why := lookup(ServiceRedis); ep != "" || !strings.Contains(why, "SWITCHYARD_REDIS_ADDR is set but "+closed+" does not answer") {
		t.Fatalf("closed port: %q, %q", ep, why)
	}
	t.Setenv("SWITCHYARD_REDIS_ADDR", "")
	mu.Lock()
	delete(starters, ServiceRedis)
	mu.Unlock()
	if _, why := lookup(ServiceRedis); !strings.Contains(why, "switchyardtest/containers") {
		t.Fatalf("no starter: %q should name the containers module", why)
	}

	calls := 0
	RegisterContainer(ServiceRedis, func(ctx context.Context) (string, func(), error) {
		calls++
		return "127.0.0.1:16379", func() { calls += 100 }, nil
	})
	for range 2 {
		if ep, why := lookup(ServiceRedis); ep != "127.0.0.1:16379" || why != "" {
			t.Fatalf("registered starter: %q, %q", ep, why)
		}
	}
	if calls != 1 {
		t.Fatalf("the container was started %d times, want once per process", calls)
	}
	StopContainers()
	if calls != 101 {
		t.Fatalf("StopContainers did not stop the container (calls=%d)", calls)
	}
	RegisterContainer(ServiceRedis, func(ctx context.Context) (string, func(), error) {
		return "", nil, errors.New("no Docker engine")
	})
	if _, why := lookup(ServiceRedis); !strings.Contains(why, "starting a container failed: no Docker engine") {
		t.Fatalf("failing starter: %q", why)
	}
	mu.Lock()
	delete(starters, ServiceRedis)
	mu.Unlock()
	if _, why := lookup(Service("Kafka")); !strings.Contains(why, "unknown service") {
		t.Fatalf("unknown service: %q", why)
	}
}

func TestDial_URLForms(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	for _, ep := range []string{addr, "amqp://guest:guest@" + addr + "/", "postgres://postgres@" + addr + "/test?sslmode=disable", "http://" + addr} {
		if err := dial(ep); err != nil {
			t.Errorf("dial(%q) = %v", ep, err)
		}
	}
	if err := dial("ftp://example.invalid/x"); err == nil || !strings.Contains(err.Error(), "no port") {
		t.Errorf("dial without a port: %v", err)
	}
	if got := redact("amqp://guest:secret@127.0.0.1:5672/"); strings.Contains(got, "secret") {
		t.Errorf("redact kept the password: %s", got)
	}
}
