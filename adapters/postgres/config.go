package postgres

import (
	"hash/fnv"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Limits of the driver's parameters.
const (
	// DefaultMaxMessageSize is Capabilities.MaxMessageSize unless
	// max_message_size says otherwise: 1 MiB.
	DefaultMaxMessageSize = 1 << 20
	// MaxMessageSizeLimit is the largest max_message_size accepted: 64 MiB.
	// PostgreSQL itself stores up to 1 GiB in a bytea, but a queue row
	// that large would stall every receive that reads it; large inputs
	// travel by reference (claim check).
	MaxMessageSizeLimit = 64 << 20
	// DefaultMaxBatch is Capabilities.MaxBatch unless max_batch says
	// otherwise: the most messages one statement publishes, leases, acks
	// or extends.
	DefaultMaxBatch = 1000
	// MaxBatchLimit is the largest max_batch accepted.
	MaxBatchLimit = 10000
	// DefaultSchema holds the broker's tables unless schema says
	// otherwise.
	DefaultSchema = "switchyard_broker"
)

// Config configures a driver opened with OpenConfig (ParseURL reads one
// from a URL). The zero value of each field means its default.
type Config struct {
	// DSN is the pgx connection string (URL or key=value form) without the
	// driver's own parameters.
	DSN string
	// Schema holds the broker's tables (1–63 of [a-z0-9_], not starting
	// with a digit or "pg_"). Defaults to DefaultSchema. Every Driver on a
	// schema sees the same lanes; tests take a fresh schema each.
	Schema string
	// DedupWindow is how long an idempotency key is remembered. Defaults
	// to 24h.
	DedupWindow time.Duration
	// MaxMessageSize is the largest Message.Size accepted. Defaults to
	// DefaultMaxMessageSize; at most MaxMessageSizeLimit.
	MaxMessageSize int
	// MaxBatch is Capabilities.MaxBatch. Defaults to DefaultMaxBatch.
	MaxBatch int
	// DefaultMaxAttempts limits deliveries of messages published with
	// MaxAttempts 0. Defaults to 25, like broker.Options.
	DefaultMaxAttempts int
	// Poll is how often a waiting Receive looks again when no notification
	// came: a safety net for notifications lost while the listening
	// connection was down. Messages becoming due (run-at, nack delays,
	// expired leases) are waited for precisely, not polled. Defaults to
	// 1s.
	Poll time.Duration
	// Vacuum is how often the driver looks at its queue table's dead
	// tuples and, past VacuumThreshold, vacuums it (one process at a
	// time per schema, under an advisory lock): every ack deletes a row
	// and every lease updates one, and a server whose autovacuum is off
	// or slow to come round (autovacuum_naptime) would let them pile
	// up. Negative turns it off (autovacuum alone: see the package
	// documentation). URL parameter vacuum (0s: off). Defaults to 10s.
	Vacuum time.Duration
	// MustExist refuses to create the schema: a missing schema is an
	// error (operator tools open existing queues only). URL parameter
	// create=false. Defaults to false (created when missing).
	MustExist bool
}

func (c Config) withDefaults() Config {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.DedupWindow <= 0 {
		c.DedupWindow = 24 * time.Hour
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.DefaultMaxAttempts <= 0 {
		c.DefaultMaxAttempts = 25
	}
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	if c.Vacuum == 0 {
		c.Vacuum = 10 * time.Second
	}
	return c
}

func (c Config) validate() error {
	if err := validSchema(c.Schema); err != nil {
		return err
	}
	if c.MaxMessageSize > MaxMessageSizeLimit {
		return broker.Invalidf("postgres broker: max_message_size %d is above the limit of %d", c.MaxMessageSize, MaxMessageSizeLimit)
	}
	if c.MaxBatch > MaxBatchLimit {
		return broker.Invalidf("postgres broker: max_batch %d is above the limit of %d", c.MaxBatch, MaxBatchLimit)
	}
	if c.DefaultMaxAttempts > broker.MaxAttemptsLimit {
		return broker.Invalidf("postgres broker: default_max_attempts %d is above the limit of %d", c.DefaultMaxAttempts, broker.MaxAttemptsLimit)
	}
	return nil
}

// validSchema accepts 1–63 characters of [a-z0-9_] not starting with a
// digit or "pg_" (PostgreSQL reserves it): names that need no quoting and
// mean the same to every tool.
func validSchema(s string) error {
	if s == "" || len(s) > 63 {
		return broker.Invalidf("postgres broker: schema %q must be 1-63 characters", s)
	}
	if strings.HasPrefix(s, "pg_") || s[0] >= '0' && s[0] <= '9' {
		return broker.Invalidf("postgres broker: schema %q must not start with a digit or pg_", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return broker.Invalidf("postgres broker: schema %q may hold only a-z, 0-9 and _", s)
		}
	}
	return nil
}

// pgxParams are the URL query parameters passed through to pgx: its
// connection and pool settings. Anything else that is not the driver's own
// is refused, so a typo is never sent to the server as a setting.
var pgxParams = map[string]bool{
	"connect_timeout": true, "sslmode": true, "sslkey": true, "sslcert": true, "sslcertmode": true,
	"sslrootcert": true, "sslnegotiation": true, "sslpassword": true, "sslsni": true, "krbspn": true,
	"krbsrvname": true, "target_session_attrs": true, "service": true, "servicefile": true,
	"min_protocol_version": true, "max_protocol_version": true, "channel_binding": true, "require_auth": true,
	"passfile": true, "application_name": true,
	"pool_max_conns": true, "pool_min_conns": true, "pool_min_idle_conns": true, "pool_max_conn_lifetime": true,
	"pool_max_conn_idle_time": true, "pool_health_check_period": true, "pool_max_conn_lifetime_jitter": true,
	"pool_ping_timeout":        true,
	"statement_cache_capacity": true, "description_cache_capacity": true, "default_query_exec_mode": true,
}

// driverParams are the driver's own URL parameters.
var driverParams = []string{"schema", "namespace", "dedup_window", "max_message_size", "max_batch", "default_max_attempts", "poll", "vacuum", "create"}

// parseURL reads a postgres:// or postgresql:// broker URL. Errors match
// broker.ErrInvalid and never quote the password.
func parseURL(u *url.URL) (Config, error) {
	if u == nil {
		return Config{}, broker.Invalidf("postgres broker: nil URL")
	}
	switch strings.ToLower(u.Scheme) {
	case "postgres", "postgresql":
	default:
		return Config{}, broker.Invalidf("postgres broker: cannot open scheme %q", u.Scheme)
	}
	if u.Opaque != "" {
		return Config{}, broker.Invalidf("postgres broker: URL must be postgres://[user[:password]@]host[:port]/database[?params]")
	}
	if u.Fragment != "" || u.RawFragment != "" {
		return Config{}, broker.Invalidf("postgres broker: URL must not have a fragment")
	}
	vals, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, broker.Invalidf("postgres broker: URL query does not parse")
	}
	mine := url.Values{}
	var unknown []string
	for k, v := range vals {
		switch {
		case isDriverParam(k):
			mine[k] = v
			delete(vals, k)
		case k == "search_path":
			return Config{}, broker.Invalidf("postgres broker: use schema=, not search_path=")
		case !pgxParams[k]:
			unknown = append(unknown, k)
		}
	}
	q := broker.NewQuery(&url.URL{RawQuery: mine.Encode()})
	schema, ns := q.String("schema", ""), q.String("namespace", "")
	switch {
	case schema != "" && ns != "":
		q.Errorf("give schema or namespace, not both (a namespace names the schema %s)", SchemaFor(ns))
	case ns != "":
		if err := broker.ValidateName("namespace", ns); err != nil {
			return Config{}, broker.Invalidf("postgres broker: %v", err)
		}
		schema = SchemaFor(ns)
	case schema == "":
		schema = DefaultSchema
	}
	c := Config{
		Schema:             schema,
		DedupWindow:        q.Duration("dedup_window", 24*time.Hour),
		MaxMessageSize:     q.Int("max_message_size", DefaultMaxMessageSize),
		MaxBatch:           q.Int("max_batch", DefaultMaxBatch),
		DefaultMaxAttempts: q.Int("default_max_attempts", 25),
		Poll:               q.Duration("poll", time.Second),
		MustExist:          !q.Bool("create", true),
		Vacuum:             q.Duration("vacuum", 10*time.Second),
	}
	if c.Vacuum == 0 {
		c.Vacuum = -1 // vacuum=0s: off
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		q.Errorf("unknown parameter(s) %s (the broker's: %s; and pgx's connection and pool_* parameters)",
			strings.Join(unknown, ", "), strings.Join(driverParams, ", "))
	}
	if err := q.Finish(); err != nil {
		return Config{}, broker.Invalidf("postgres %s", strings.TrimPrefix(err.Error(), "invalid input: "))
	}
	if c.DedupWindow <= 0 {
		return Config{}, broker.Invalidf("postgres broker: dedup_window must be positive")
	}
	if c.Poll <= 0 {
		return Config{}, broker.Invalidf("postgres broker: poll must be positive")
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"max_message_size", c.MaxMessageSize}, {"max_batch", c.MaxBatch}, {"default_max_attempts", c.DefaultMaxAttempts}} {
		if p.v <= 0 {
			return Config{}, broker.Invalidf("postgres broker: %s must be positive", p.name)
		}
	}
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	rest := *u
	rest.Scheme = "postgres"
	rest.RawQuery = vals.Encode()
	c.DSN = rest.String()
	return c, nil
}

// SchemaFor is the schema that the URL parameter namespace=ns names:
// "sy_" and ns in lower case with every character outside [a-z0-9_] made
// "_", and a hash of ns appended when that changed anything or the name
// would pass 63 characters, so that two namespaces never share a schema.
func SchemaFor(ns string) string {
	var b strings.Builder
	b.WriteString("sy_")
	changed := false
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_':
			b.WriteByte(c)
		default:
			changed = true
			if c >= 'A' && c <= 'Z' {
				b.WriteByte(c + 'a' - 'A')
			} else {
				b.WriteByte('_')
			}
		}
	}
	s := b.String()
	if changed || len(s) > 63 {
		h := fnv.New32a()
		h.Write([]byte(ns))
		suffix := "_" + strconv.FormatUint(uint64(h.Sum32()), 36)
		s = s[:min(len(s), 63-len(suffix))] + suffix
	}
	return s
}

func isDriverParam(k string) bool {
	for _, p := range driverParams {
		if p == k {
			return true
		}
	}
	return false
}
