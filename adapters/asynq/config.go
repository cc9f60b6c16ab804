package asynq

import (
	"crypto/tls"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Config is the parsed form of a redis:// or rediss:// URL. Every field has
// a safe default; ParseURL documents the query parameter for each.
type Config struct {
	// Addr is host:port. Defaults to 127.0.0.1:6379.
	Addr string
	// Username and Password authenticate (AUTH); both may be empty.
	Username, Password string
	// DB is the Redis database number. Defaults to 0.
	DB int
	// TLS is non-nil for rediss:// URLs.
	TLS *tls.Config
	// Namespace prefixes every queue name: lane L is asynq queue
	// "<Namespace>:L", or just "L" when Namespace is empty (the default),
	// which is what a plain asynq client uses.
	Namespace string
	// DedupWindow is how long an idempotency key stays claimed. Defaults to
	// 24h; 0 from the URL ("dedup_window=0s") means forever.
	DedupWindow time.Duration
	// MaxMessageSize is the largest Message.Size accepted. Defaults to 1 MiB.
	MaxMessageSize int
	// MaxBatch is the largest Publish, Receive, Ack and Extend batch.
	// Defaults to 500.
	MaxBatch int
	// Poll is the longest an idle Receive sleeps between looks at Redis when
	// no notification arrives (tasks from a plain asynq client publish
	// none). Defaults to 50ms.
	Poll time.Duration
	// DialTimeout, ReadTimeout and WriteTimeout bound every Redis call.
	// Defaults to 2s, 3s and 3s.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// PoolSize is the connection pool size. Defaults to go-redis's (10 per
	// CPU).
	PoolSize int
	// ArchiveMaxSize caps the dead letters kept per queue; 0 (the default)
	// keeps them all. When set, the oldest are deleted beyond it and each
	// deletion is logged with the task ID.
	ArchiveMaxSize int
	// ArchiveMaxAge deletes dead letters older than it; 0 (the default)
	// keeps them forever. Deletions are logged with the task ID.
	ArchiveMaxAge time.Duration
}

var namespaceRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)

// ParseURL parses a redis:// or rediss:// URL:
//
//	redis://[user[:password]@]host[:port][/db][?param=value&...]
//	rediss://...   (TLS)
//
// Parameters: namespace, dedup_window, max_message_size, max_batch, poll,
// dial_timeout, read_timeout, write_timeout, pool_size, archive_max_size,
// archive_max_age, tls_server_name, tls_insecure_skip_verify. Unknown
// parameters are an error. Errors never contain the password.
func ParseURL(u *url.URL) (*Config, error) {
	if u == nil {
		return nil, broker.Invalidf("nil URL")
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "redis" && scheme != "rediss" {
		return nil, broker.Invalidf("asynq adapter: scheme %q is not redis or rediss", u.Scheme)
	}
	if u.Opaque != "" {
		return nil, broker.Invalidf("asynq adapter: URL must look like redis://host:port/db")
	}
	c := &Config{}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "6379"
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return nil, broker.Invalidf("asynq adapter: port %q is not a port number", port)
	}
	c.Addr = net.JoinHostPort(host, port)
	if u.User != nil {
		c.Username = u.User.Username()
		c.Password, _ = u.User.Password()
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		db, err := strconv.Atoi(p)
		if err != nil || db < 0 {
			return nil, broker.Invalidf("asynq adapter: database %q in the URL path is not a non-negative number", p)
		}
		c.DB = db
	}
	q := broker.NewQuery(u)
	c.Namespace = q.String("namespace", "")
	c.DedupWindow = q.Duration("dedup_window", 24*time.Hour)
	c.MaxMessageSize = q.Int("max_message_size", 1<<20)
	c.MaxBatch = q.Int("max_batch", 500)
	c.Poll = q.Duration("poll", 50*time.Millisecond)
	c.DialTimeout = q.Duration("dial_timeout", 2*time.Second)
	c.ReadTimeout = q.Duration("read_timeout", 3*time.Second)
	c.WriteTimeout = q.Duration("write_timeout", 3*time.Second)
	c.PoolSize = q.Int("pool_size", 0)
	c.ArchiveMaxSize = q.Int("archive_max_size", 0)
	c.ArchiveMaxAge = q.Duration("archive_max_age", 0)
	serverName := q.String("tls_server_name", "")
	insecure := q.Bool("tls_insecure_skip_verify", false)
	if c.Namespace != "" && (!namespaceRE.MatchString(c.Namespace) || len(c.Namespace) > broker.MaxNameLen) {
		q.Errorf("namespace %q must be up to %d characters of [A-Za-z0-9_.:-], not starting with punctuation", c.Namespace, broker.MaxNameLen)
	}
	if c.MaxMessageSize <= 0 || c.MaxMessageSize > 512<<20 {
		q.Errorf("max_message_size %d must be between 1 and 536870912 (Redis's string limit)", c.MaxMessageSize)
	}
	if c.MaxBatch <= 0 || c.MaxBatch > 5000 {
		q.Errorf("max_batch %d must be between 1 and 5000", c.MaxBatch)
	}
	if c.Poll < time.Millisecond {
		q.Errorf("poll %s must be at least 1ms", c.Poll)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"dial_timeout", c.DialTimeout}, {"read_timeout", c.ReadTimeout}, {"write_timeout", c.WriteTimeout}} {
		if d.v < 10*time.Millisecond {
			q.Errorf("%s %s must be at least 10ms (timeouts are what keep calls from hanging)", d.name, d.v)
		}
	}
	if c.PoolSize < 0 {
		q.Errorf("pool_size %d is negative", c.PoolSize)
	}
	if c.ArchiveMaxSize < 0 {
		q.Errorf("archive_max_size %d is negative", c.ArchiveMaxSize)
	}
	if scheme == "redis" && (serverName != "" || insecure) {
		q.Errorf("tls_server_name and tls_insecure_skip_verify need a rediss:// URL")
	}
	if err := q.Finish(); err != nil {
		return nil, err
	}
	if scheme == "rediss" {
		c.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: insecure}
		if c.TLS.ServerName == "" {
			c.TLS.ServerName = host
		}
	}
	return c, nil
}

// QueueName returns the asynq queue that carries lane under namespace.
func QueueName(namespace, lane string) string {
	if namespace == "" {
		return lane
	}
	return namespace + ":" + lane
}

// withDefaults returns a copy of c with zero fields set to their defaults
// (DedupWindow and the archive caps keep 0, which has a meaning).
func (c *Config) withDefaults() *Config {
	d := *c
	if d.Addr == "" {
		d.Addr = "127.0.0.1:6379"
	}
	if d.MaxMessageSize <= 0 {
		d.MaxMessageSize = 1 << 20
	}
	if d.MaxBatch <= 0 {
		d.MaxBatch = 500
	}
	if d.Poll < time.Millisecond {
		d.Poll = 50 * time.Millisecond
	}
	if d.DialTimeout <= 0 {
		d.DialTimeout = 2 * time.Second
	}
	if d.ReadTimeout <= 0 {
		d.ReadTimeout = 3 * time.Second
	}
	if d.WriteTimeout <= 0 {
		d.WriteTimeout = 3 * time.Second
	}
	return &d
}
