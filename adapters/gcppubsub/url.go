package gcppubsub

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Defaults and limits of the URL parameters.
const (
	// DefaultNamespace prefixes topic and subscription names when the URL
	// gives none.
	DefaultNamespace = "switchyard"
	// DefaultMaxDeliveries is the dead-letter policy's
	// max_delivery_attempts on created subscriptions: the backstop that
	// moves a message that keeps killing its consumers to the dead-letter
	// topic, and what makes Pub/Sub count delivery attempts at all.
	DefaultMaxDeliveries = 100

	maxNamespaceLen = 48
	minDeliveries   = 5   // Pub/Sub's floor for max_delivery_attempts
	maxDeliveries   = 100 // and its ceiling
	maxAckDeadline  = 600 * time.Second
	subAckDeadline  = 10 // seconds: the ack deadline of created subscriptions (the minimum)
	maxPublishBatch = 1000
	maxPublishBytes = 10_000_000 // a Publish request's limit (data + attributes)
	maxMessageData  = 10_000_000 // a message's limit
	minMessageData  = 1 << 16
	maxPullBatch    = 1000
)

var (
	namespaceRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	// projectRE: Google Cloud project IDs are 6–30 lowercase letters,
	// digits and hyphens, starting with a letter. The emulator accepts
	// the same (the tests use "switchyard-test").
	projectRE = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)
)

// Config is the parsed form of a gcppubsub:// URL.
type Config struct {
	// Project is the Google Cloud project that holds the topics and
	// subscriptions (the URL's host). Required.
	Project string
	// Namespace prefixes every topic and subscription name: lowercase
	// letters, digits and "-", 1–48 characters. Defaults to "switchyard".
	Namespace string
	// Emulator is the host:port of a Pub/Sub emulator (pstest or Google's
	// emulator), reached in plaintext without credentials. Empty means the
	// real service.
	Emulator string
	// Endpoint overrides the service endpoint (a regional endpoint such
	// as europe-west1-pubsub.googleapis.com:443). Empty means the
	// library's default.
	Endpoint string
	// Create makes the driver create missing topics and subscriptions.
	// Defaults to true.
	Create bool
	// MaxDeliveries is the max_delivery_attempts of the dead-letter policy
	// of created subscriptions, 5–100. Defaults to 100.
	MaxDeliveries int
	// Ordering creates subscriptions with message ordering and publishes
	// ordering keys natively. Defaults to false (the framework's sequencer
	// orders keys).
	Ordering bool
	// ExactlyOnce creates subscriptions with exactly-once delivery, so
	// that an ack or deadline change on a lost lease is reported. Defaults
	// to false.
	ExactlyOnce bool
	// MaxMessageSize is the largest Pub/Sub message the driver publishes,
	// in bytes: 65,536–10,000,000 (Pub/Sub's own limit). It is the basis
	// of Capabilities.MaxMessageSize. Defaults to 10,000,000.
	MaxMessageSize int
}

// ParseURL parses a gcppubsub:// URL:
//
//	gcppubsub://my-project?namespace=myapp&ordering=true
//	gcppubsub://switchyard-test?emulator=127.0.0.1:8085
//
// Unknown parameters are an ErrInvalid error.
func ParseURL(u *url.URL) (*Config, error) {
	if u.Scheme != "gcppubsub" {
		return nil, broker.Invalidf("gcppubsub: URL scheme %q is not gcppubsub", u.Scheme)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.Opaque != "" || u.Port() != "" {
		return nil, broker.Invalidf("gcppubsub: the URL is gcppubsub://PROJECT?params: no credentials (they come from Application Default Credentials), port or path")
	}
	q := broker.NewQuery(u)
	c := &Config{
		Project:        u.Hostname(),
		Namespace:      q.String("namespace", DefaultNamespace),
		Emulator:       q.String("emulator", ""),
		Endpoint:       q.String("endpoint", ""),
		Create:         q.Bool("create", true),
		MaxDeliveries:  q.Int("max_deliveries", DefaultMaxDeliveries),
		Ordering:       q.Bool("ordering", false),
		ExactlyOnce:    q.Bool("exactly_once", false),
		MaxMessageSize: q.Int("max_message_size", maxMessageData),
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
	if !projectRE.MatchString(c.Project) {
		p = append(p, fmt.Sprintf("project %q (the URL's host) must be a Google Cloud project ID: 6–30 lowercase letters, digits or '-', starting with a letter", c.Project))
	}
	if len(c.Namespace) > maxNamespaceLen || !namespaceRE.MatchString(c.Namespace) || strings.HasPrefix(c.Namespace, "goog") {
		p = append(p, fmt.Sprintf("namespace %q must be 1–%d lowercase letters, digits or '-', starting with a letter and not with \"goog\"", c.Namespace, maxNamespaceLen))
	}
	if c.MaxMessageSize < minMessageData || c.MaxMessageSize > maxMessageData {
		p = append(p, fmt.Sprintf("max_message_size=%d is outside %d–%d", c.MaxMessageSize, minMessageData, maxMessageData))
	}
	for _, hp := range []struct{ name, v string }{{"emulator", c.Emulator}, {"endpoint", c.Endpoint}} {
		if hp.v == "" {
			continue
		}
		host, port, err := net.SplitHostPort(hp.v)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			p = append(p, fmt.Sprintf("%s must be host:port", hp.name))
		}
	}
	if c.Emulator != "" && c.Endpoint != "" {
		p = append(p, "emulator and endpoint exclude each other")
	}
	if c.MaxDeliveries < minDeliveries || c.MaxDeliveries > maxDeliveries {
		p = append(p, fmt.Sprintf("max_deliveries=%d is outside %d–%d (Pub/Sub's dead-letter policy range)", c.MaxDeliveries, minDeliveries, maxDeliveries))
	}
	return p
}
