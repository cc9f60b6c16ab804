package redisstreams

import (
	"crypto/tls"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Defaults and limits of the URL parameters (see the package documentation).
const (
	DefaultPrefix         = "sy"
	DefaultNamespace      = "default"
	DefaultConsumer       = "switchyard"
	DefaultDedupWindow    = 24 * time.Hour
	DefaultMaxMessageSize = 1 << 20
	DefaultMaxBatch       = 1000
	DefaultPoll           = 500 * time.Millisecond

	// MaxMessageSizeLimit is the largest max_message_size: Redis's
	// proto-max-bulk-len default (512 MiB) less room for the envelope.
	MaxMessageSizeLimit = 512<<20 - 64<<10
	// MaxBatchLimit is the largest max_batch (one Lua call per batch).
	MaxBatchLimit = 5000
	// maxLeaseMS caps a lease or delay kept in a sorted-set score (about
	// 100 years; scores are doubles, exact to 2^53 ms).
	maxLeaseMS = 100 * 365 * 24 * 3600 * 1000
)

// Config is a parsed redis-streams:// URL.
type Config struct {
	// Addr is host:port. Defaults to 127.0.0.1:6379.
	Addr string
	// Username and Password authenticate (AUTH); both may be empty.
	Username, Password string
	// DB is the Redis database (the URL's path). Defaults to 0.
	DB int
	// TLS is non-nil when tls=true.
	TLS *tls.Config
	// Prefix and Namespace name every key: "<prefix>:{<namespace>}:…".
	Prefix, Namespace string
	// Consumer is the consumer name in the lanes' consumer groups.
	Consumer string
	// DedupWindow is how long an idempotency key stays claimed; 0 means
	// forever.
	DedupWindow time.Duration
	// MaxMessageSize is the largest Message.Size accepted.
	MaxMessageSize int
	// MaxBatch is the largest Publish, Receive, Ack and Extend batch.
	MaxBatch int
	// MaxLen, when positive, refuses a publish (transient) to a lane that
	// already holds that many unacknowledged or delayed messages.
	MaxLen int
	// Poll is the longest single blocking wait of an idle Receive.
	Poll time.Duration
	// DialTimeout, ReadTimeout and WriteTimeout bound every Redis call.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// PoolSize is the connection pool size (0: go-redis's default).
	PoolSize int
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)

// ParseURL parses a redis-streams:// URL:
//
//	redis-streams://[user[:password]@]host[:port][/db][?param=value&...]
//
// Unknown parameters are an ErrInvalid error naming them; errors never
// contain the password.
func ParseURL(u *url.URL) (*Config, error) {
	if u == nil {
		return nil, broker.Invalidf("redis-streams: nil URL")
	}
	if !strings.EqualFold(u.Scheme, "redis-streams") {
		return nil, broker.Invalidf("redis-streams: URL scheme %q is not redis-streams", u.Scheme)
	}
	if u.Opaque != "" {
		return nil, broker.Invalidf("redis-streams: URL must look like redis-streams://[user:password@]host:port/db?params")
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
		return nil, broker.Invalidf("redis-streams: port %q is not a port number", port)
	}
	if strings.ContainsAny(host, ",/ ") {
		return nil, broker.Invalidf("redis-streams: one server per URL (host %q)", host)
	}
	c.Addr = net.JoinHostPort(host, port)
	if u.User != nil {
		c.Username = u.User.Username()
		c.Password, _ = u.User.Password()
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		db, err := strconv.Atoi(p)
		if err != nil || db < 0 || db > 1<<20 {
			return nil, broker.Invalidf("redis-streams: database %q in the URL path is not a database number", p)
		}
		c.DB = db
	}
	q := broker.NewQuery(u)
	c.Prefix = q.String("prefix", DefaultPrefix)
	c.Namespace = q.String("namespace", DefaultNamespace)
	c.Consumer = q.String("consumer", DefaultConsumer)
	c.DedupWindow = q.Duration("dedup_window", DefaultDedupWindow)
	c.MaxMessageSize = q.Int("max_message_size", DefaultMaxMessageSize)
	c.MaxBatch = q.Int("max_batch", DefaultMaxBatch)
	c.MaxLen = q.Int("max_len", 0)
	c.Poll = q.Duration("poll", DefaultPoll)
	c.DialTimeout = q.Duration("dial_timeout", 2*time.Second)
	c.ReadTimeout = q.Duration("read_timeout", 3*time.Second)
	c.WriteTimeout = q.Duration("write_timeout", 3*time.Second)
	c.PoolSize = q.Int("pool_size", 0)
	useTLS := q.Bool("tls", false)
	serverName := q.String("tls_server_name", "")
	insecure := q.Bool("tls_insecure_skip_verify", false)
	for _, n := range []struct{ what, v string }{{"prefix", c.Prefix}, {"namespace", c.Namespace}, {"consumer", c.Consumer}} {
		if !nameRE.MatchString(n.v) || len(n.v) > broker.MaxNameLen {
			q.Errorf("%s %q must be 1 to %d characters of [A-Za-z0-9_.:-], not starting with punctuation", n.what, n.v, broker.MaxNameLen)
		}
	}
	if c.MaxMessageSize <= 0 || c.MaxMessageSize > MaxMessageSizeLimit {
		q.Errorf("max_message_size %d must be between 1 and %d", c.MaxMessageSize, MaxMessageSizeLimit)
	}
	if c.MaxBatch <= 0 || c.MaxBatch > MaxBatchLimit {
		q.Errorf("max_batch %d must be between 1 and %d", c.MaxBatch, MaxBatchLimit)
	}
	if c.MaxLen < 0 {
		q.Errorf("max_len %d is negative", c.MaxLen)
	}
	if c.Poll < 10*time.Millisecond || c.Poll > time.Minute {
		q.Errorf("poll %s must be between 10ms and 1m", c.Poll)
	}
	if c.DedupWindow > 0 && c.DedupWindow < time.Millisecond {
		q.Errorf("dedup_window %s must be 0 (forever) or at least 1ms", c.DedupWindow)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"dial_timeout", c.DialTimeout}, {"read_timeout", c.ReadTimeout}, {"write_timeout", c.WriteTimeout}} {
		if d.v < 10*time.Millisecond {
			q.Errorf("%s %s must be at least 10ms (timeouts are what keep calls from hanging)", d.name, d.v)
		}
	}
	if c.PoolSize < 0 || c.PoolSize > 10000 {
		q.Errorf("pool_size %d must be between 0 (default) and 10000", c.PoolSize)
	}
	if !useTLS && (serverName != "" || insecure) {
		q.Errorf("tls_server_name and tls_insecure_skip_verify need tls=true")
	}
	if err := q.Finish(); err != nil {
		return nil, err
	}
	if useTLS {
		c.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: insecure}
		if c.TLS.ServerName == "" {
			c.TLS.ServerName = host
		}
	}
	return c, nil
}

// keys names the Redis keys of one namespace. Every key carries the
// namespace as a hash tag, so a namespace lives in one cluster slot and
// every Lua script touches one slot.
type keys struct {
	base string // <prefix>:{<namespace>}:
}

func newKeys(prefix, ns string) keys { return keys{base: prefix + ":{" + ns + "}:"} }

// queue is one consumable stream: a lane's live queue or its dead-letter
// queue, with the keys that hold its leases.
type queue struct {
	lane   string
	dead   bool
	stream string // the entries (XADD), consumer group "sy"
	lease  string // sorted set: member (see receiveScript) → lease deadline (ms)
	wait   string // sorted set: member → when a nacked entry is due again (ms)
	delay  string // sorted set: token → run-at (ms), messages not yet due
	held   string // hash: token → envelope of a delayed message

	trimMu   sync.Mutex
	trimNext time.Time // when this process next trims the stream's head
}

// trimEvery is how often a process trims a live stream's acknowledged
// head.
const trimEvery = time.Second

// dueTrim reports whether the stream's head should be trimmed now.
func (q *queue) dueTrim() bool {
	if q.dead {
		return false
	}
	q.trimMu.Lock()
	defer q.trimMu.Unlock()
	now := time.Now()
	if now.Before(q.trimNext) {
		return false
	}
	q.trimNext = now.Add(trimEvery)
	return true
}

func (k keys) queue(lane string, dead bool) *queue {
	p := k.base + "l:" + lane + ":"
	if dead {
		p = k.base + "d:" + lane + ":"
	}
	return &queue{lane: lane, dead: dead, stream: p + "s", lease: p + "lease", wait: p + "wait", delay: p + "delay", held: p + "held"}
}

func (k keys) lanes() string { return k.base + "lanes" }

// dedup is the key of an idempotency key's claim.
func (k keys) dedup(h string) string { return k.base + "k:" + h }

// Pattern is the SCAN pattern of every key of the namespace.
func (k keys) pattern() string { return k.base + "*" }
