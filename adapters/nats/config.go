package nats

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"hash/fnv"
	"net/url"
	"os"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

// Defaults for the URL parameters (see the package documentation).
const (
	DefaultNamespace      = "default"
	DefaultAckWait        = 30 * time.Second
	DefaultMaxDeliver     = 100
	DefaultDedupWindow    = 2 * time.Minute
	DefaultPullExpiry     = 5 * time.Second
	DefaultPublishTimeout = 5 * time.Second
	DefaultMaxAckPending  = -1
	DefaultMaxBatch       = 1000
	DefaultConnectTimeout = 5 * time.Second
)

// config is a parsed nats:// URL.
type config struct {
	server    string // nats://host:port, without credentials
	user      string
	password  string
	token     string
	credsFile string
	nkeyFile  string

	tls         bool
	tlsCA       string
	tlsCert     string
	tlsKey      string
	tlsInsecure bool

	namespace      string
	nsToken        string // namespace as a single subject token and stream-name part
	ackWait        time.Duration
	maxDeliver     int
	dedupWindow    time.Duration
	pullExpiry     time.Duration
	publishTimeout time.Duration
	connectTimeout time.Duration
	maxAckPending  int
	maxBatch       int
	replicas       int
	storage        jetstream.StorageType
	name           string
}

// parseURL reads a nats:// URL. Errors never contain the password or token.
func parseURL(u *url.URL) (*config, error) {
	if u == nil {
		return nil, broker.Invalidf("nats: nil URL")
	}
	if !strings.EqualFold(u.Scheme, "nats") {
		return nil, broker.Invalidf("nats: URL scheme %q is not nats", u.Scheme)
	}
	if u.Opaque != "" {
		return nil, broker.Invalidf("nats: URL must look like nats://[user:password@]host:port/[namespace]?params")
	}
	c := &config{}
	host := u.Host
	if host == "" {
		host = "127.0.0.1:4222"
	} else if u.Port() == "" {
		host = strings.TrimSuffix(host, ":") + ":4222"
	}
	if strings.Contains(host, ",") {
		return nil, broker.Invalidf("nats: one server per URL (got a comma-separated host list)")
	}
	c.server = "nats://" + host
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			c.user, c.password = u.User.Username(), p
		} else {
			c.token = u.User.Username()
		}
	}

	q := broker.NewQuery(u)
	pathNS := strings.Trim(u.Path, "/")
	c.namespace = q.String("namespace", "")
	switch {
	case c.namespace != "" && pathNS != "" && pathNS != c.namespace:
		q.Errorf("namespace given both in the path (%q) and as a parameter (%q)", pathNS, c.namespace)
	case c.namespace == "" && pathNS != "":
		c.namespace = pathNS
	case c.namespace == "":
		c.namespace = DefaultNamespace
	}
	c.ackWait = q.Duration("ack_wait", DefaultAckWait)
	c.maxDeliver = q.Int("max_deliver", DefaultMaxDeliver)
	c.dedupWindow = q.Duration("dedup_window", DefaultDedupWindow)
	c.pullExpiry = q.Duration("pull_expiry", DefaultPullExpiry)
	c.publishTimeout = q.Duration("publish_timeout", DefaultPublishTimeout)
	c.connectTimeout = q.Duration("connect_timeout", DefaultConnectTimeout)
	c.maxAckPending = q.Int("max_ack_pending", DefaultMaxAckPending)
	c.maxBatch = q.Int("max_batch", DefaultMaxBatch)
	c.replicas = q.Int("replicas", 1)
	storage := q.String("storage", "file")
	c.name = q.String("name", "switchyard")
	c.credsFile = q.String("creds", "")
	c.nkeyFile = q.String("nkey", "")
	if tok := q.String("token", ""); tok != "" {
		if c.token != "" || c.user != "" {
			q.Errorf("token given both as a parameter and in the URL's user part")
		}
		c.token = tok
	}
	c.tls = q.Bool("tls", false)
	c.tlsCA = q.String("tls_ca", "")
	c.tlsCert = q.String("tls_cert", "")
	c.tlsKey = q.String("tls_key", "")
	c.tlsInsecure = q.Bool("tls_insecure", false)

	if c.ackWait < 100*time.Millisecond {
		q.Errorf("parameter \"ack_wait\" must be at least 100ms")
	}
	if c.maxDeliver == 0 || c.maxDeliver < -1 {
		q.Errorf("parameter \"max_deliver\" must be -1 (unlimited) or at least 1")
	}
	if c.dedupWindow <= 0 {
		q.Errorf("parameter \"dedup_window\" must be positive")
	}
	if c.pullExpiry < 100*time.Millisecond || c.pullExpiry > time.Minute {
		q.Errorf("parameter \"pull_expiry\" must be between 100ms and 1m")
	}
	if c.publishTimeout <= 0 {
		q.Errorf("parameter \"publish_timeout\" must be positive")
	}
	if c.connectTimeout <= 0 {
		q.Errorf("parameter \"connect_timeout\" must be positive")
	}
	if c.maxAckPending == 0 || c.maxAckPending < -1 {
		q.Errorf("parameter \"max_ack_pending\" must be -1 (unlimited) or at least 1")
	}
	if c.maxBatch < 1 || c.maxBatch > 10000 {
		q.Errorf("parameter \"max_batch\" must be between 1 and 10000")
	}
	if c.replicas < 1 || c.replicas > 5 {
		q.Errorf("parameter \"replicas\" must be between 1 and 5")
	}
	switch strings.ToLower(storage) {
	case "file":
		c.storage = jetstream.FileStorage
	case "memory":
		c.storage = jetstream.MemoryStorage
	default:
		q.Errorf("parameter \"storage\" must be file or memory")
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		q.Errorf("parameters \"tls_cert\" and \"tls_key\" go together")
	}
	if (c.tlsCA != "" || c.tlsCert != "" || c.tlsInsecure) && !c.tls {
		c.tls = true
	}
	if len(c.namespace) > 200 {
		q.Errorf("namespace is %d bytes, the limit is 200", len(c.namespace))
	}
	if err := q.Finish(); err != nil {
		return nil, err
	}
	c.nsToken = token(c.namespace)
	return c, nil
}

// token maps s to a NATS subject token that is also valid in stream and
// consumer names: [A-Za-z0-9_-]. Names that need mapping get a hash suffix so
// that distinct inputs never collide.
func token(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			clean = false
			break
		}
	}
	if clean && s != "" {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if tokenByte(s[i]) {
			b.WriteByte(s[i])
		} else {
			b.WriteByte('_')
		}
	}
	h := fnv.New32a()
	h.Write([]byte(s))
	fmt.Fprintf(&b, "_%08x", h.Sum32())
	return b.String()
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// redactedServer is the server address, safe for errors and logs.
func (c *config) redactedServer() string { return c.server }

// connect dials the server with reconnection configured so that a server
// restart is survived and calls during an outage fail fast instead of
// buffering.
func (c *config) connect(ctx context.Context) (*natsgo.Conn, error) {
	opts := []natsgo.Option{
		natsgo.Name(c.name),
		natsgo.Timeout(c.connectTimeout),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(250 * time.Millisecond),
		natsgo.ReconnectJitter(100*time.Millisecond, time.Second),
		// No reconnect buffer: a publish while disconnected fails at once
		// (transient) instead of sitting in a buffer with an unknown fate.
		natsgo.ReconnectBufSize(-1),
		natsgo.PingInterval(5 * time.Second),
		natsgo.MaxPingsOutstanding(2),
		// Silence the library's default handlers that print to stderr.
		natsgo.ErrorHandler(func(*natsgo.Conn, *natsgo.Subscription, error) {}),
	}
	switch {
	case c.user != "":
		opts = append(opts, natsgo.UserInfo(c.user, c.password))
	case c.token != "":
		opts = append(opts, natsgo.Token(c.token))
	}
	if c.credsFile != "" {
		opts = append(opts, natsgo.UserCredentials(c.credsFile))
	}
	if c.nkeyFile != "" {
		o, err := natsgo.NkeyOptionFromSeed(c.nkeyFile)
		if err != nil {
			return nil, broker.Invalidf("nats: nkey seed file %q: %v", c.nkeyFile, scrub(err, c))
		}
		opts = append(opts, o)
	}
	if c.tls {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, natsgo.Secure(tc))
	}
	type res struct {
		nc  *natsgo.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		nc, err := natsgo.Connect(c.server, opts...)
		ch <- res{nc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, classify("connect "+c.redactedServer(), scrub(r.err, c))
		}
		return r.nc, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, broker.Wrap("connect "+c.redactedServer(), broker.Transient, ctx.Err())
	}
}

func (c *config) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.tlsInsecure} //nolint:gosec // opt-in by URL parameter
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, broker.Invalidf("nats: tls_ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, broker.Invalidf("nats: tls_ca %q holds no PEM certificate", c.tlsCA)
		}
		tc.RootCAs = pool
	}
	if c.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, broker.Invalidf("nats: tls_cert/tls_key: %v", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// scrub removes the password and token from an error's text, in case a
// library echoes them.
func scrub(err error, c *config) error {
	if err == nil {
		return nil
	}
	s := err.Error()
	changed := false
	for _, secret := range []string{c.password, c.token} {
		if len(secret) >= 3 && strings.Contains(s, secret) {
			s = strings.ReplaceAll(s, secret, "xxxxx")
			changed = true
		}
	}
	if !changed {
		return err
	}
	return &scrubbed{msg: s, err: err}
}

// scrubbed keeps the cause for errors.Is while showing redacted text.
type scrubbed struct {
	msg string
	err error
}

func (s *scrubbed) Error() string { return s.msg }
func (s *scrubbed) Unwrap() error { return s.err }
