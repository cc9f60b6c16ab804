package sqs

import (
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Defaults and limits of the URL parameters.
const (
	// DefaultNamespace prefixes queue names when the URL gives none.
	DefaultNamespace = "switchyard"
	// DefaultMaxReceives is the RedrivePolicy maxReceiveCount of created
	// queues: the backstop that moves a message that keeps killing its
	// consumers to the dead-letter queue.
	DefaultMaxReceives = 100
	// DefaultMaxMessageSize is the MaximumMessageSize of created queues,
	// SQS's default (1 MiB) since 2025.
	DefaultMaxMessageSize = 1 << 20
	// DefaultSDKMaxAttempts is how many HTTP attempts the SDK's standard
	// retryer makes per call (one call plus two retries).
	DefaultSDKMaxAttempts = 3

	maxNamespaceLen   = 48
	minMessageSizeSQS = 1024
	maxMessageSizeSQS = 1 << 20
	maxReceivesSQS    = 1000
	maxWaitSQS        = 20 * time.Second
	maxDelaySQS       = 15 * time.Minute
	maxVisibilitySQS  = 12 * time.Hour
	maxBatchSQS       = 10
)

var namespaceRE = regexp.MustCompile(`^[A-Za-z0-9-]+$`)

// Config is the parsed form of an sqs:// URL.
type Config struct {
	// Namespace prefixes every queue name: letters, digits and "-", 1–48
	// characters. Defaults to "switchyard".
	Namespace string
	// Region overrides the region of the AWS configuration chain.
	Region string
	// Endpoint overrides the service endpoint (BaseEndpoint), for emulators
	// and VPC endpoints. Empty means the SDK's own resolution.
	Endpoint string
	// FIFO selects FIFO queues (names ending in ".fifo").
	FIFO bool
	// Create makes the driver create missing queues (and their dead-letter
	// queues). With false it only looks them up. Defaults to true.
	Create bool
	// MaxReceives is the RedrivePolicy maxReceiveCount of created queues.
	// Defaults to 100.
	MaxReceives int
	// MaxMessageSize is the MaximumMessageSize of created queues in bytes,
	// and the basis of Capabilities.MaxMessageSize. Defaults to 1 MiB.
	MaxMessageSize int
	// SDKMaxAttempts is the SDK retryer's attempt limit per call. Defaults
	// to 3.
	SDKMaxAttempts int
	// Logger receives the warnings of background work: a FIFO lane's
	// mover that cannot poll or move its delay queue (at most one line a
	// minute while it fails, and one when it recovers). Not set from the
	// URL. Defaults to slog.Default().
	Logger *slog.Logger
}

// ParseURL parses an sqs:// URL:
//
//	sqs://?namespace=myapp&region=eu-west-1&fifo=true&endpoint=http://127.0.0.1:9324
//
// Unknown parameters are an ErrInvalid error.
func ParseURL(u *url.URL) (*Config, error) {
	if u.Scheme != "sqs" {
		return nil, broker.Invalidf("sqs: URL scheme %q is not sqs", u.Scheme)
	}
	if u.User != nil || u.Host != "" || (u.Path != "" && u.Path != "/") || u.Opaque != "" {
		return nil, broker.Invalidf("sqs: the URL carries no host, path or credentials (credentials come from the AWS configuration chain); write sqs://?region=…&endpoint=…")
	}
	q := broker.NewQuery(u)
	c := &Config{
		Namespace:      q.String("namespace", DefaultNamespace),
		Region:         q.String("region", ""),
		Endpoint:       q.String("endpoint", ""),
		FIFO:           q.Bool("fifo", false),
		Create:         q.Bool("create", true),
		MaxReceives:    q.Int("max_receives", DefaultMaxReceives),
		MaxMessageSize: q.Int("max_message_size", DefaultMaxMessageSize),
		SDKMaxAttempts: q.Int("sdk_max_attempts", DefaultSDKMaxAttempts),
	}
	for _, e := range c.problems() {
		q.Errorf("%s", e)
	}
	if err := q.Finish(); err != nil {
		return nil, err
	}
	return c, nil
}

// problems lists what is wrong with c.
func (c *Config) problems() []string {
	var p []string
	if len(c.Namespace) > maxNamespaceLen || !namespaceRE.MatchString(c.Namespace) {
		p = append(p, fmt.Sprintf("namespace %q must be 1–%d letters, digits or '-'", c.Namespace, maxNamespaceLen))
	}
	if c.Endpoint != "" {
		e, err := url.Parse(c.Endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil {
			p = append(p, "endpoint must be an http(s)://host[:port] URL without credentials")
		}
	}
	if c.MaxReceives < 1 || c.MaxReceives > maxReceivesSQS {
		p = append(p, fmt.Sprintf("max_receives=%d is outside 1–%d", c.MaxReceives, maxReceivesSQS))
	}
	if c.MaxMessageSize < minMessageSizeSQS || c.MaxMessageSize > maxMessageSizeSQS {
		p = append(p, fmt.Sprintf("max_message_size=%d is outside %d–%d", c.MaxMessageSize, minMessageSizeSQS, maxMessageSizeSQS))
	}
	if c.SDKMaxAttempts < 1 || c.SDKMaxAttempts > 10 {
		p = append(p, fmt.Sprintf("sdk_max_attempts=%d is outside 1–10", c.SDKMaxAttempts))
	}
	return p
}
