package containers_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/switchyardtest"
	"github.com/switchyard-dev/switchyard/switchyardtest/containers"
)

var services = []switchyardtest.Service{
	switchyardtest.ServiceRabbitMQ, switchyardtest.ServiceRedis, switchyardtest.ServiceNATS,
	switchyardtest.ServicePostgres, switchyardtest.ServiceSQS, switchyardtest.ServicePubSub,
}

// Every service the helpers know has a starter.
func TestStarters_CoverEveryService(t *testing.T) {
	for _, s := range services {
		if containers.Starters[s] == nil {
			t.Errorf("no container starter for %s", s)
		}
	}
	if len(containers.Starters) != len(services) {
		t.Errorf("%d starters for %d services", len(containers.Starters), len(services))
	}
}

// Without a Docker engine, a starter refuses at once and says why, rather
// than letting testcontainers panic; with one, it starts Redis and the
// endpoint answers.
func TestStarters_Redis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	why := containers.DockerUnavailable(ctx)
	ep, stop, err := containers.Starters[switchyardtest.ServiceRedis](ctx)
	if why != "" {
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Fatalf("without Docker (%s) the starter returned %q, %v; want the reason", why, ep, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Docker answers but Redis did not start: %v", err)
	}
	defer stop()
	c, err := net.DialTimeout("tcp", ep, 10*time.Second)
	if err != nil {
		t.Fatalf("the Redis container at %s does not answer: %v", ep, err)
	}
	c.Close()
}
