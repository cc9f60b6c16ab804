package switchyardtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Service is a broker or database the endpoint helpers know.
type Service string

// The services, by the name the containers module registers them under.
const (
	ServiceRabbitMQ Service = "RabbitMQ"
	ServiceRedis    Service = "Redis"
	ServiceNATS     Service = "NATS"
	ServicePostgres Service = "PostgreSQL"
	ServiceSQS      Service = "SQS"
	ServicePubSub   Service = "Pub/Sub"
)

// EnvVar is the environment variable a service's endpoint is read from.
func (s Service) EnvVar() string {
	switch s {
	case ServiceRabbitMQ:
		return "SWITCHYARD_RABBITMQ_URL" // amqp://guest:guest@127.0.0.1:5672/
	case ServiceRedis:
		return "SWITCHYARD_REDIS_ADDR" // 127.0.0.1:6379
	case ServiceNATS:
		return "SWITCHYARD_NATS_URL" // nats://127.0.0.1:4222 (JetStream on)
	case ServicePostgres:
		return "SWITCHYARD_POSTGRES_DSN" // postgres://postgres@127.0.0.1:5432/test?sslmode=disable
	case ServiceSQS:
		return "SWITCHYARD_SQS_ENDPOINT" // http://127.0.0.1:4566
	case ServicePubSub:
		return "SWITCHYARD_PUBSUB_EMULATOR" // 127.0.0.1:8085
	}
	return ""
}

// Starter starts a service in a container and returns its endpoint (in the
// form of the service's environment variable) and a function that stops
// it.
type Starter func(ctx context.Context) (endpoint string, stop func(), err error)

var (
	mu       sync.Mutex
	starters = map[Service]Starter{}
	started  = map[Service]string{}
	stops    []func()
)

// RegisterContainer makes the endpoint helpers start s with start when its
// environment variable is not set. The containers module calls it for
// every service when it is imported; a test binary without that import
// never starts a container.
func RegisterContainer(s Service, start Starter) {
	mu.Lock()
	defer mu.Unlock()
	starters[s] = start
}

// StopContainers stops the containers this process started. Call it from
// TestMain after m.Run; testcontainers' reaper also removes them when the
// process exits.
func StopContainers() {
	mu.Lock()
	defer mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	stops, started = nil, map[Service]string{}
}

// RabbitMQ returns the AMQP URL of a RabbitMQ for the test.
func RabbitMQ(t testing.TB) string { t.Helper(); return Endpoint(t, ServiceRabbitMQ) }

// Redis returns the host:port of a Redis for the test.
func Redis(t testing.TB) string { t.Helper(); return Endpoint(t, ServiceRedis) }

// NATS returns the URL of a NATS server with JetStream for the test.
func NATS(t testing.TB) string { t.Helper(); return Endpoint(t, ServiceNATS) }

// Postgres returns the DSN of a PostgreSQL database for the test.
func Postgres(t testing.TB) string { t.Helper(); return Endpoint(t, ServicePostgres) }

// SQS returns the endpoint URL of an SQS-compatible service (LocalStack in
// a container) for the test.
func SQS(t testing.TB) string { t.Helper(); return Endpoint(t, ServiceSQS) }

// PubSub returns the host:port of a Pub/Sub emulator for the test.
func PubSub(t testing.TB) string { t.Helper(); return Endpoint(t, ServicePubSub) }

// Endpoint returns the service's endpoint: its environment variable when
// set (the service must then answer a TCP dial), else a container when the
// containers module is linked in and Docker answers. Otherwise the test is
// skipped with the reason, or fails when SWITCHYARD_REQUIRE_BROKERS=1.
// A container is started once per process and shared by its tests.
func Endpoint(t testing.TB, s Service) string {
	t.Helper()
	ep, why := lookup(s)
	if ep != "" {
		return ep
	}
	if os.Getenv("SWITCHYARD_REQUIRE_BROKERS") == "1" {
		t.Fatalf("%s is required (SWITCHYARD_REQUIRE_BROKERS=1) but unavailable: %s", s, why)
	}
	t.Skipf("%s unavailable, skipping: %s (set SWITCHYARD_REQUIRE_BROKERS=1 to fail instead)", s, why)
	return ""
}

func lookup(s Service) (endpoint, why string) {
	env := s.EnvVar()
	if env == "" {
		return "", fmt.Sprintf("unknown service %q", string(s))
	}
	if v := strings.TrimSpace(os.Getenv(env)); v != "" {
		if err := dial(v); err != nil {
			return "", fmt.Sprintf("%s is set but %s does not answer: %v", env, redact(v), err)
		}
		return v, ""
	}
	mu.Lock()
	defer mu.Unlock()
	if ep, ok := started[s]; ok {
		return ep, ""
	}
	start, ok := starters[s]
	if !ok {
		return "", fmt.Sprintf("%s is not set, and no container can be started: the test binary does not import github.com/switchyard-dev/switchyard/switchyardtest/containers", env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ep, stop, err := start(ctx)
	if err != nil {
		return "", fmt.Sprintf("%s is not set, and starting a container failed: %v", env, err)
	}
	started[s] = ep
	stops = append(stops, stop)
	return ep, ""
}

// dial checks that something listens at the endpoint's host:port.
func dial(endpoint string) error {
	hostport := endpoint
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil {
			return fmt.Errorf("not a URL: %v", err)
		}
		hostport = u.Host
		if u.Port() == "" {
			port := map[string]string{"amqp": "5672", "amqps": "5671", "nats": "4222", "postgres": "5432",
				"postgresql": "5432", "redis": "6379", "http": "80", "https": "443"}[u.Scheme]
			if port == "" {
				return fmt.Errorf("no port in the URL")
			}
			hostport = net.JoinHostPort(u.Hostname(), port)
		}
	}
	c, err := net.DialTimeout("tcp", hostport, 3*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// redact hides a URL's password.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}
