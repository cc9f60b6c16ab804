// Package testenv gives tests the endpoints of the brokers and databases
// they run against.
//
// # Where endpoints come from
//
// For each service, in order:
//
//  1. The environment variable (SWITCHYARD_RABBITMQ_URL, SWITCHYARD_REDIS_ADDR,
//     SWITCHYARD_NATS_URL, SWITCHYARD_SQS_ENDPOINT, SWITCHYARD_POSTGRES_DSN)
//     when it is set.
//  2. The local default (RabbitMQ amqp://guest:guest@127.0.0.1:5672/, Redis
//     127.0.0.1:6379, NATS nats://127.0.0.1:4222, PostgreSQL
//     postgres://postgres@127.0.0.1:5432/test) when something listens there.
//  3. Otherwise the test is skipped with the reason, except when
//     SWITCHYARD_REQUIRE_BROKERS=1, where it fails.
//
// No container is started here: testcontainers-go and the Docker client
// would enter the library module's test imports, and so every user's
// go.sum. With Docker and no local brokers, run the images that
// switchyardtest/containers documents (docker run -p …) and set the
// variables; a user's tests get containers from that module directly.
//
// A service is checked with a TCP dial, so a skip says which address was
// tried and why it was refused.
package testenv

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Service names one external dependency of the tests.
type Service struct {
	Name    string // human name, e.g. "RabbitMQ"
	EnvVar  string // e.g. SWITCHYARD_RABBITMQ_URL
	Default string // local default endpoint ("" when there is none)
}

// The services the tests use.
var (
	RabbitMQ = Service{Name: "RabbitMQ", EnvVar: "SWITCHYARD_RABBITMQ_URL", Default: "amqp://guest:guest@127.0.0.1:5672/"}
	Redis    = Service{Name: "Redis", EnvVar: "SWITCHYARD_REDIS_ADDR", Default: "127.0.0.1:6379"}
	NATS     = Service{Name: "NATS JetStream", EnvVar: "SWITCHYARD_NATS_URL", Default: "nats://127.0.0.1:4222"}
	SQS      = Service{Name: "SQS", EnvVar: "SWITCHYARD_SQS_ENDPOINT", Default: ""}
	Postgres = Service{Name: "PostgreSQL", EnvVar: "SWITCHYARD_POSTGRES_DSN", Default: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"}
)

// RequireBrokers reports whether SWITCHYARD_REQUIRE_BROKERS=1 is set: a
// missing service then fails the test instead of skipping it.
func RequireBrokers() bool { return os.Getenv("SWITCHYARD_REQUIRE_BROKERS") == "1" }

var (
	mu        sync.Mutex
	resolved  = map[string]string{}
	failures  = map[string]string{}
	dialCheck = reachable
)

// Endpoint returns the service's endpoint, or skips (or fails, when brokers
// are required) the test with the reason it is unavailable. The result is
// cached per process.
func (s Service) Endpoint(t testing.TB) string {
	t.Helper()
	ep, why := s.resolve()
	if ep != "" {
		return ep
	}
	if RequireBrokers() {
		t.Fatalf("%s is required (SWITCHYARD_REQUIRE_BROKERS=1) but unavailable: %s", s.Name, why)
	}
	t.Skipf("%s unavailable, skipping: %s (set %s, or SWITCHYARD_REQUIRE_BROKERS=1 to fail instead)", s.Name, why, s.EnvVar)
	return ""
}

// Lookup returns the endpoint and "" or "" and the reason it is unavailable,
// without touching a test.
func (s Service) Lookup() (endpoint, why string) { return s.resolve() }

func (s Service) resolve() (string, string) {
	mu.Lock()
	defer mu.Unlock()
	if ep, ok := resolved[s.Name]; ok {
		return ep, ""
	}
	if why, ok := failures[s.Name]; ok {
		return "", why
	}
	ep, why := s.find()
	if ep != "" {
		resolved[s.Name] = ep
	} else {
		failures[s.Name] = why
	}
	return ep, why
}

func (s Service) find() (string, string) {
	if v := strings.TrimSpace(os.Getenv(s.EnvVar)); v != "" {
		if err := dialCheck(v); err != nil {
			return "", fmt.Sprintf("%s=%s is not reachable: %v", s.EnvVar, redact(v), err)
		}
		return v, ""
	}
	var reasons []string
	if s.Default != "" {
		if err := dialCheck(s.Default); err == nil {
			return s.Default, ""
		} else {
			reasons = append(reasons, fmt.Sprintf("nothing at the default %s (%v)", redact(s.Default), err))
		}
	} else {
		reasons = append(reasons, s.EnvVar+" is not set and there is no local default")
	}
	return "", strings.Join(reasons, "; ")
}

// reachable dials the host:port of an endpoint given as a URL, a DSN URL or
// a bare host:port.
func reachable(endpoint string) error {
	hostport, err := HostPort(endpoint)
	if err != nil {
		return err
	}
	c, err := net.DialTimeout("tcp", hostport, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// HostPort extracts host:port from a URL ("amqp://u:p@h:5672/v",
// "http://h:4566") or returns a bare "host:port" unchanged.
func HostPort(endpoint string) (string, error) {
	if !strings.Contains(endpoint, "://") {
		if _, _, err := net.SplitHostPort(endpoint); err != nil {
			return "", fmt.Errorf("%q is neither a URL nor host:port", endpoint)
		}
		return endpoint, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("endpoint does not parse as a URL")
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		switch u.Scheme {
		case "amqp", "rabbitmq":
			port = "5672"
		case "amqps":
			port = "5671"
		case "nats":
			port = "4222"
		case "postgres", "postgresql":
			port = "5432"
		case "http":
			port = "80"
		case "https":
			port = "443"
		case "redis":
			port = "6379"
		default:
			return "", fmt.Errorf("no port in %s", redact(endpoint))
		}
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

func redact(s string) string {
	if !strings.Contains(s, "://") {
		return s // a bare host:port carries no credentials
	}
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable endpoint)"
	}
	return broker.Redact(u)
}

// EmulatorAWSCredentials gives the AWS SDK dummy static credentials when
// none are configured (no AWS_ACCESS_KEY_ID and no AWS_PROFILE), and turns
// off the EC2 metadata lookup: the SQS emulator checks no credentials, and
// without this the SDK's default chain ends at IMDS and fails. Call it from
// TestMain, before any test runs in parallel: it sets process environment.
func EmulatorAWSCredentials() {
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		os.Setenv("AWS_ACCESS_KEY_ID", "test")
		os.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	}
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}
