package embedded

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Config configures a driver opened with OpenConfig (ParseURL reads one
// from a URL). The zero value of each field means its default.
type Config struct {
	// Path is the database file. Empty with Memory set means in-process.
	Path string
	// Memory selects an in-process database named MemoryName (shared by
	// every driver of the process that opens the same name).
	Memory     bool
	MemoryName string
	// Namespace separates independent sets of lanes in one file. Defaults
	// to "default".
	Namespace string
	// DedupWindow is how long an idempotency key is remembered. Defaults to
	// 24h.
	DedupWindow time.Duration
	// MaxMessageSize is the largest Message.Size accepted. Defaults to
	// 1 MiB.
	MaxMessageSize int
	// Poll is how often a waiting Receive looks for messages published by
	// other processes or becoming due. Publishes in this process wake it at
	// once. Defaults to 25ms.
	Poll time.Duration
	// SyncFull makes every commit fsync the WAL (synchronous=FULL): nothing
	// is lost even on power failure. The default (synchronous=NORMAL) loses
	// nothing when the process is killed; a power failure may lose the last
	// commits.
	SyncFull bool
	// DefaultMaxAttempts limits deliveries of messages published with
	// MaxAttempts 0. Defaults to 25, like broker.Options.
	DefaultMaxAttempts int
	// Reduced makes the driver behave like a minimal broker: no native
	// ordering, deduplication or attempt limit, and delays of at most one
	// second. It exists to prove the framework's fallbacks with the
	// conformance suite; production code has no reason to set it.
	Reduced bool
	// Logger receives warnings (a database file others can read). Defaults
	// to slog.Default().
	Logger *slog.Logger
	// MustExist refuses to create the database file: a path with no file
	// is an error saying "no such database" (operator tools open existing
	// queues only). URL parameter create=false. Defaults to false
	// (created when missing).
	MustExist bool
	// Now is the clock that decides when a delayed message is due, when a
	// lease expires and when a dedup key is forgotten. Defaults to
	// time.Now. Tests move it forward (switchyardtest.Clock) to run delays
	// and expire leases without waiting; how often a waiting Receive looks
	// again is still real time (Poll).
	Now func() time.Time
}

func (c *Config) withDefaults() Config {
	o := *c
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.DedupWindow <= 0 {
		o.DedupWindow = 24 * time.Hour
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = 1 << 20
	}
	if o.Poll <= 0 {
		o.Poll = 25 * time.Millisecond
	}
	if o.DefaultMaxAttempts <= 0 {
		o.DefaultMaxAttempts = 25
	}
	if o.MemoryName == "" {
		o.MemoryName = "default"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

func openURL(ctx context.Context, u *url.URL) (broker.Driver, error) {
	c, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, c)
}

// ParseURL reads an embedded:// or mem:// URL (see the package
// documentation). Unknown or malformed parameters are an ErrInvalid error.
func ParseURL(u *url.URL) (*Config, error) {
	var c Config
	switch u.Scheme {
	case "mem":
		c.Memory = true
		c.MemoryName = u.Host
		if u.Path != "" && u.Path != "/" {
			return nil, broker.Invalidf("mem:// URL takes a name as host (mem://name), not a path %q", u.Path)
		}
	case "embedded":
		if u.Host != "" {
			// embedded://rel/path.db: host is the first path element.
			c.Path = u.Host + u.Path
		} else {
			c.Path = u.Path
		}
		if c.Path == "" || c.Path == "/" {
			return nil, broker.Invalidf("embedded:// URL needs a file path, e.g. embedded:///var/lib/app/switchyard.db or embedded://./switchyard.db")
		}
		c.Path = strings.TrimPrefix(c.Path, "./")
	default:
		return nil, broker.Invalidf("embedded driver cannot open scheme %q", u.Scheme)
	}
	q := broker.NewQuery(u)
	c.Namespace = q.String("namespace", "default")
	c.DedupWindow = q.Duration("dedup_window", 24*time.Hour)
	c.MaxMessageSize = q.Int("max_message_size", 1<<20)
	c.Poll = q.Duration("poll", 25*time.Millisecond)
	c.SyncFull = q.Bool("sync_full", false)
	c.Reduced = q.Bool("reduced", false)
	c.DefaultMaxAttempts = q.Int("default_max_attempts", 25)
	c.MustExist = !q.Bool("create", true)
	if err := q.Finish(); err != nil {
		return nil, err
	}
	if err := broker.ValidateName("namespace", c.Namespace); err != nil {
		return nil, err
	}
	if c.MaxMessageSize <= 0 {
		return nil, broker.Invalidf("max_message_size must be positive")
	}
	return &c, nil
}

// OpenURL opens a driver from an embedded:// or mem:// URL.
func OpenURL(ctx context.Context, rawURL string) (*Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, broker.Invalidf("embedded: URL does not parse")
	}
	d, err := openURL(ctx, u)
	if err != nil {
		return nil, err
	}
	return d.(*Driver), nil
}
