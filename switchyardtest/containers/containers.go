// Package containers starts the brokers Switchyard supports in Docker
// containers with testcontainers-go, for tests whose environment does not
// name an endpoint. It is a module of its own, so that testcontainers-go
// and the Docker client stay out of the library's dependencies: only a
// test binary that imports this package links them.
//
// # Using it
//
// Import it for its side effect in a test file; switchyardtest's helpers
// then start a container when the service's environment variable is not
// set, once per test binary:
//
//	import _ "github.com/switchyard-dev/switchyard/switchyardtest/containers"
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		switchyardtest.StopContainers()
//		os.Exit(code)
//	}
//
//	func TestWithRabbitMQ(t *testing.T) {
//		url := switchyardtest.RabbitMQ(t) // SWITCHYARD_RABBITMQ_URL, else a container
//		...
//	}
//
// # Images
//
// The images are pinned (the constants below; started with testcontainers-go
// v0.40.0 and its modules of the same version) to the versions the
// conformance suite is proven against:
//
//	RabbitMQ    rabbitmq:3.13-alpine                                    (testcontainers-go modules/rabbitmq)
//	Redis       redis:7.0-alpine                                        (modules/redis)
//	NATS        nats:2.10-alpine, started with -js                      (modules/nats)
//	PostgreSQL  postgres:15-alpine, database test, user postgres        (modules/postgres)
//	SQS         localstack/localstack:3.8, SERVICES=sqs                 (modules/localstack)
//	Pub/Sub     gcr.io/google.com/cloudsdktool/cloud-sdk:367.0.0-emulators (a generic container)
//
// A Docker engine must answer (DOCKER_HOST, or /var/run/docker.sock);
// without one the helpers skip the test, naming why.
package containers

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tclocalstack "github.com/testcontainers/testcontainers-go/modules/localstack"
	tcnats "github.com/testcontainers/testcontainers-go/modules/nats"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcrabbitmq "github.com/testcontainers/testcontainers-go/modules/rabbitmq"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/switchyard-dev/switchyard/switchyardtest"
)

// The images started, pinned.
const (
	RabbitMQImage   = "rabbitmq:3.13-alpine"
	RedisImage      = "redis:7.0-alpine"
	NATSImage       = "nats:2.10-alpine"
	PostgresImage   = "postgres:15-alpine"
	LocalStackImage = "localstack/localstack:3.8"
	PubSubImage     = "gcr.io/google.com/cloudsdktool/cloud-sdk:367.0.0-emulators"
)

// Starters are the container starters by service, as registered with
// switchyardtest.
var Starters = map[switchyardtest.Service]switchyardtest.Starter{
	switchyardtest.ServiceRabbitMQ: withDocker(startRabbitMQ),
	switchyardtest.ServiceRedis:    withDocker(startRedis),
	switchyardtest.ServiceNATS:     withDocker(startNATS),
	switchyardtest.ServicePostgres: withDocker(startPostgres),
	switchyardtest.ServiceSQS:      withDocker(startLocalStack),
	switchyardtest.ServicePubSub:   withDocker(startPubSub),
}

func init() {
	for s, start := range Starters {
		switchyardtest.RegisterContainer(s, start)
	}
}

// withDocker refuses at once, with the reason, when no Docker engine
// answers, instead of letting testcontainers panic or wait.
func withDocker(start switchyardtest.Starter) switchyardtest.Starter {
	return func(ctx context.Context) (string, func(), error) {
		if why := DockerUnavailable(ctx); why != "" {
			return "", nil, fmt.Errorf("no container: %s", why)
		}
		return start(ctx)
	}
}

// DockerUnavailable returns "" when a Docker engine answers, else why not.
func DockerUnavailable(ctx context.Context) (why string) {
	// testcontainers panics (MustExtractDockerHost) when it finds no Docker
	// host at all; look first, and never let a probe kill the test binary.
	if os.Getenv("DOCKER_HOST") == "" {
		if _, err := os.Stat("/var/run/docker.sock"); err != nil {
			return "no DOCKER_HOST and no /var/run/docker.sock"
		}
	}
	defer func() {
		if r := recover(); r != nil {
			why = fmt.Sprintf("no usable Docker engine: %v", r)
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "no Docker client: " + firstLine(err.Error())
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.Health(ctx); err != nil {
		return "no Docker engine answers: " + firstLine(err.Error())
	}
	return ""
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func terminator(c testcontainers.Container) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Terminate(ctx)
	}
}

func startRabbitMQ(ctx context.Context) (string, func(), error) {
	c, err := tcrabbitmq.Run(ctx, RabbitMQImage)
	if err != nil {
		return "", nil, err
	}
	u, err := c.AmqpURL(ctx)
	if err != nil {
		terminator(c)()
		return "", nil, err
	}
	return u, terminator(c), nil
}

func startRedis(ctx context.Context) (string, func(), error) {
	c, err := tcredis.Run(ctx, RedisImage)
	if err != nil {
		return "", nil, err
	}
	u, err := c.ConnectionString(ctx) // redis://host:port
	if err != nil {
		terminator(c)()
		return "", nil, err
	}
	return strings.TrimPrefix(u, "redis://"), terminator(c), nil
}

func startNATS(ctx context.Context) (string, func(), error) {
	c, err := tcnats.Run(ctx, NATSImage, testcontainers.WithCmdArgs("-js"))
	if err != nil {
		return "", nil, err
	}
	u, err := c.ConnectionString(ctx)
	if err != nil {
		terminator(c)()
		return "", nil, err
	}
	return u, terminator(c), nil
}

func startPostgres(ctx context.Context) (string, func(), error) {
	c, err := tcpostgres.Run(ctx, PostgresImage,
		tcpostgres.WithDatabase("test"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(60*time.Second)),
	)
	if err != nil {
		return "", nil, err
	}
	u, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		terminator(c)()
		return "", nil, err
	}
	return u, terminator(c), nil
}

func startLocalStack(ctx context.Context) (string, func(), error) {
	c, err := tclocalstack.Run(ctx, LocalStackImage, testcontainers.WithEnv(map[string]string{"SERVICES": "sqs"}))
	if err != nil {
		return "", nil, err
	}
	ep, err := c.PortEndpoint(ctx, "4566/tcp", "http")
	if err != nil {
		terminator(c)()
		return "", nil, fmt.Errorf("localstack endpoint: %w", err)
	}
	return ep, terminator(c), nil
}

func startPubSub(ctx context.Context) (string, func(), error) {
	c, err := testcontainers.Run(ctx, PubSubImage,
		testcontainers.WithExposedPorts("8085/tcp"),
		testcontainers.WithCmd("/bin/sh", "-c", "gcloud beta emulators pubsub start --host-port 0.0.0.0:8085 --project=switchyard-test"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("8085/tcp"), wait.ForLog("started")),
	)
	if err != nil {
		if c != nil {
			terminator(c)()
		}
		return "", nil, err
	}
	ep, err := c.PortEndpoint(ctx, "8085/tcp", "")
	if err != nil {
		terminator(c)()
		return "", nil, fmt.Errorf("pubsub emulator endpoint: %w", err)
	}
	return ep, terminator(c), nil
}
