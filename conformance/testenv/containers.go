package testenv

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
)

// Container images used when no endpoint is configured and Docker is
// reachable. They match the brokers the suite is proven against here.
const (
	RabbitMQImage   = "rabbitmq:3.13-alpine"
	RedisImage      = "redis:7.0-alpine"
	NATSImage       = "nats:2.10-alpine"
	PostgresImage   = "postgres:15-alpine"
	LocalStackImage = "localstack/localstack:3.8"
)

// dockerUnavailable returns "" when a Docker engine answers, else why not.
var dockerUnavailable = func() (why string) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
