package rabbitmq

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

// Defaults for the URL's tuning parameters.
const (
	DefaultNamespace      = "default"
	DefaultPrefetch       = 256
	DefaultConfirmWindow  = 100
	DefaultDeliveryLimit  = 100
	DefaultHeartbeat      = 10 * time.Second
	DefaultConnectTimeout = 5 * time.Second
	DefaultConfirmTimeout = 30 * time.Second
	DefaultIdleRelease    = 100 * time.Millisecond
	DefaultMaxMessageSize = 16 << 20
	// MaxDelay is the longest native delay: the largest delay bucket.
	MaxDelay = 24 * time.Hour
	// maxQueueName is RabbitMQ's limit on queue names (a short string).
	maxQueueName = 255
)

// config is a parsed rabbitmq:// or amqps:// URL. It never holds the raw URL,
// so nothing can print the password by accident.
type config struct {
	addr     string // host:port
	tls      *tls.Config
	user     string
	password string
	vhost    string

	namespace      string
	prefetch       int
	confirmWindow  int
	deliveryLimit  int
	heartbeat      time.Duration
	connectTimeout time.Duration
	confirmTimeout time.Duration
	idleRelease    time.Duration
	maxMessageSize int
	connName       string
	redacted       string
	tlsParams      tlsParams // as given, for ParseURL
}

// tlsParams are the URL's TLS parameters as given.
type tlsParams struct {
	on                                    bool
	serverName, caFile, certFile, keyFile string
	insecure                              bool
}

// parseURL reads a rabbitmq:// or amqps:// URL. Errors are ErrInvalid and
// never contain the password.
func parseURL(u *url.URL) (*config, error) {
	c := &config{redacted: broker.Redact(u)}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "rabbitmq" && scheme != "amqps" {
		return nil, broker.Invalidf("rabbitmq: scheme %q is not rabbitmq or amqps", u.Scheme)
	}
	if u.Opaque != "" {
		return nil, broker.Invalidf("rabbitmq: URL must have the form rabbitmq://user:pass@host:port/vhost")
	}
	q := broker.NewQuery(u)
	useTLS := q.Bool("tls", scheme == "amqps")
	if scheme == "amqps" && !useTLS {
		q.Errorf("tls=false contradicts the amqps scheme")
	}
	host := u.Hostname()
	if host == "" {
		host = "127.0.0.1"
	}
	port := u.Port()
	if port == "" {
		port = "5672"
		if useTLS {
			port = "5671"
		}
	}
	c.addr = net.JoinHostPort(host, port)
	c.user, c.password = "guest", "guest"
	if u.User != nil {
		c.user = u.User.Username()
		if p, ok := u.User.Password(); ok {
			c.password = p
		}
	}
	// The path is the vhost: "" and "/" mean "/", "/x" means "x", and
	// "/%2F" means "/" too (the AMQP URI convention).
	c.vhost = "/"
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		c.vhost = p
	}

	c.namespace = q.String("namespace", DefaultNamespace)
	c.prefetch = q.Int("prefetch", DefaultPrefetch)
	c.confirmWindow = q.Int("confirm_window", DefaultConfirmWindow)
	c.deliveryLimit = q.Int("delivery_limit", DefaultDeliveryLimit)
	c.heartbeat = q.Duration("heartbeat", DefaultHeartbeat)
	c.connectTimeout = q.Duration("connect_timeout", DefaultConnectTimeout)
	c.confirmTimeout = q.Duration("confirm_timeout", DefaultConfirmTimeout)
	c.idleRelease = q.Duration("idle_release", DefaultIdleRelease)
	c.maxMessageSize = q.Int("max_message_size", DefaultMaxMessageSize)
	c.connName = q.String("connection_name", "switchyard")
	serverName := q.String("server_name", "")
	caFile := q.String("ca_file", "")
	certFile := q.String("cert_file", "")
	keyFile := q.String("key_file", "")
	insecure := q.Bool("tls_insecure_skip_verify", false)

	if err := broker.ValidateName("namespace", c.namespace); err != nil {
		q.Errorf("namespace: %v", err)
	}
	if c.prefetch < 1 || c.prefetch > 65535 {
		q.Errorf("prefetch=%d is outside 1..65535", c.prefetch)
	}
	if c.confirmWindow < 1 || c.confirmWindow > 100000 {
		q.Errorf("confirm_window=%d is outside 1..100000", c.confirmWindow)
	}
	if c.deliveryLimit < 1 {
		q.Errorf("delivery_limit=%d must be at least 1", c.deliveryLimit)
	}
	if c.connectTimeout == 0 {
		q.Errorf("connect_timeout must be positive")
	}
	if c.confirmTimeout == 0 {
		q.Errorf("confirm_timeout must be positive")
	}
	if c.maxMessageSize < 1 || c.maxMessageSize > 512<<20 {
		q.Errorf("max_message_size=%d is outside 1..%d", c.maxMessageSize, 512<<20)
	}
	if !useTLS && (serverName != "" || caFile != "" || certFile != "" || keyFile != "" || insecure) {
		q.Errorf("TLS parameters given without tls=true or the amqps scheme")
	}
	if (certFile == "") != (keyFile == "") {
		q.Errorf("cert_file and key_file must be given together")
	}
	if err := q.Finish(); err != nil {
		return nil, err
	}
	c.tlsParams = tlsParams{on: useTLS, serverName: serverName, caFile: caFile, certFile: certFile, keyFile: keyFile, insecure: insecure}
	if useTLS {
		tc := &tls.Config{ServerName: serverName, InsecureSkipVerify: insecure, MinVersion: tls.VersionTLS12}
		if tc.ServerName == "" {
			tc.ServerName = host
		}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return nil, broker.Invalidf("rabbitmq: ca_file: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, broker.Invalidf("rabbitmq: ca_file %q holds no PEM certificate", caFile)
			}
			tc.RootCAs = pool
		}
		if certFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, broker.Invalidf("rabbitmq: cert_file/key_file: %v", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		c.tls = tc
	}
	return c, nil
}

// dialURL is the amqp:// URL handed to amqp091-go: host and port only.
// Credentials travel in amqp.Config.SASL, so no error can repeat them.
func (c *config) dialURL() string {
	if c.tls != nil {
		return "amqps://" + c.addr + "/"
	}
	return "amqp://" + c.addr + "/"
}

func (c *config) amqpConfig() amqp.Config {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(c.connName + "/" + c.namespace)
	return amqp.Config{
		SASL:            []amqp.Authentication{&amqp.PlainAuth{Username: c.user, Password: c.password}},
		Vhost:           c.vhost,
		Heartbeat:       c.heartbeat,
		TLSClientConfig: c.tls,
		Properties:      props,
		Locale:          "en_US",
		Dial:            amqp.DefaultDial(c.connectTimeout),
	}
}

// Queue names. Every queue of a namespace starts with "switchyard.<ns>.".
func (c *config) prefix() string               { return "switchyard." + c.namespace + "." }
func (c *config) workQueue(lane string) string { return c.prefix() + lane }
func (c *config) deadQueue(lane string) string { return c.prefix() + lane + ".dlq" }
func (c *config) delayQueue(lane string, bucket time.Duration) string {
	return c.prefix() + lane + ".delay." + strconv.FormatInt(bucket.Milliseconds(), 10) + "ms"
}

// checkLane reports a lane whose queue names would exceed RabbitMQ's limit.
func (c *config) checkLane(lane string) error {
	if err := broker.ValidateName("lane", lane); err != nil {
		return err
	}
	if n := len(c.delayQueue(lane, delayBuckets[len(delayBuckets)-1])); n > maxQueueName {
		return broker.Invalidf("rabbitmq: lane %q with namespace %q gives queue names of %d bytes, the limit is %d", lane, c.namespace, n, maxQueueName)
	}
	return nil
}

// delayBuckets are the upper bounds of the delay queues: 100 ms doubling up
// to past MaxDelay. A delay d goes to the smallest bucket ≥ d with a
// per-message TTL of exactly d, so a message in a bucket can wait behind one
// published earlier with a longer TTL by at most the bucket's width.
var delayBuckets = func() []time.Duration {
	var b []time.Duration
	for d := 100 * time.Millisecond; ; d *= 2 {
		b = append(b, d)
		if d >= MaxDelay {
			return b
		}
	}
}()

func bucketFor(d time.Duration) time.Duration {
	for _, b := range delayBuckets {
		if d <= b {
			return b
		}
	}
	return delayBuckets[len(delayBuckets)-1]
}
