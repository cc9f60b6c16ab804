package nats

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/urlq"
)

// Config is the parsed form of a nats:// URL (see the package
// documentation for each parameter). ParseURL reads one; OpenConfig opens
// a driver from one. The zero value of each field means its default, the
// one the URL parameter has.
type Config struct {
	// Server is the server's host:port. Defaults to 127.0.0.1:4222.
	Server string
	// User and Password authenticate by user (the URL's user part).
	User     string
	Password string
	// Token authenticates by token (the URL's user part without a
	// password, or the token parameter).
	Token string
	// CredsFile and NKeyFile are the creds and nkey parameters.
	CredsFile string
	NKeyFile  string
	// TLS, TLSCA, TLSCert, TLSKey and TLSInsecure are the tls, tls_ca,
	// tls_cert, tls_key and tls_insecure parameters.
	TLS         bool
	TLSCA       string
	TLSCert     string
	TLSKey      string
	TLSInsecure bool
	// Namespace separates independent sets of lanes. Defaults to
	// DefaultNamespace.
	Namespace string
	// AckWait is the lease of a delivery. Defaults to DefaultAckWait.
	AckWait time.Duration
	// MaxDeliver is the consumers' delivery limit (-1: unlimited). Defaults
	// to DefaultMaxDeliver.
	MaxDeliver int
	// DedupWindow is the streams' duplicate window. Defaults to
	// DefaultDedupWindow.
	DedupWindow time.Duration
	// PullExpiry bounds one pull request. Defaults to DefaultPullExpiry.
	PullExpiry time.Duration
	// PublishTimeout bounds a publish's acknowledgement. Defaults to
	// DefaultPublishTimeout.
	PublishTimeout time.Duration
	// ConnectTimeout bounds connecting. Defaults to DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// MaxAckPending is the consumers' limit on unacknowledged messages
	// (-1: unlimited). Defaults to DefaultMaxAckPending.
	MaxAckPending int
	// MaxBatch is the largest batch. Defaults to DefaultMaxBatch.
	MaxBatch int
	// Replicas is the streams' replica count. Defaults to 1.
	Replicas int
	// Storage is "file" or "memory". Defaults to "file".
	Storage string
	// Name is the connection's name. Defaults to "switchyard".
	Name string
}

// ParseURL reads a nats:// URL. Errors match broker.ErrInvalid and never
// contain the password or token.
func ParseURL(u *url.URL) (*Config, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	storage := "file"
	if c.storage == jetstream.MemoryStorage {
		storage = "memory"
	}
	return &Config{
		Server: strings.TrimPrefix(c.server, "nats://"), User: c.user, Password: c.password, Token: c.token,
		CredsFile: c.credsFile, NKeyFile: c.nkeyFile,
		TLS: c.tls, TLSCA: c.tlsCA, TLSCert: c.tlsCert, TLSKey: c.tlsKey, TLSInsecure: c.tlsInsecure,
		Namespace: c.namespace, AckWait: c.ackWait, MaxDeliver: c.maxDeliver, DedupWindow: c.dedupWindow,
		PullExpiry: c.pullExpiry, PublishTimeout: c.publishTimeout, ConnectTimeout: c.connectTimeout,
		MaxAckPending: c.maxAckPending, MaxBatch: c.maxBatch, Replicas: c.replicas, Storage: storage, Name: c.name,
	}, nil
}

// OpenConfig connects with a configuration, as Open does with a URL: the
// configuration is checked by the same rules as the URL's parameters.
func OpenConfig(ctx context.Context, cfg *Config) (*Driver, error) {
	if cfg == nil {
		return nil, broker.Invalidf("nats: nil config")
	}
	if cfg.Password != "" && cfg.User == "" {
		return nil, broker.Invalidf("nats: a password without a user")
	}
	return Open(ctx, cfg.url())
}

// url renders c as the nats:// URL that parses to it; zero fields are left
// out, so that they take the parameters' defaults.
func (c *Config) url() *url.URL {
	u := &url.URL{Scheme: "nats", Host: strings.TrimPrefix(c.Server, "nats://")}
	if c.User != "" {
		u.User = url.UserPassword(c.User, c.Password)
	}
	q := urlq.New()
	q.Str("token", c.Token)
	q.Str("creds", c.CredsFile)
	q.Str("nkey", c.NKeyFile)
	q.Bool("tls", c.TLS)
	q.Str("tls_ca", c.TLSCA)
	q.Str("tls_cert", c.TLSCert)
	q.Str("tls_key", c.TLSKey)
	q.Bool("tls_insecure", c.TLSInsecure)
	q.Str("namespace", c.Namespace)
	q.Dur("ack_wait", c.AckWait)
	q.Int("max_deliver", c.MaxDeliver)
	q.Dur("dedup_window", c.DedupWindow)
	q.Dur("pull_expiry", c.PullExpiry)
	q.Dur("publish_timeout", c.PublishTimeout)
	q.Dur("connect_timeout", c.ConnectTimeout)
	q.Int("max_ack_pending", c.MaxAckPending)
	q.Int("max_batch", c.MaxBatch)
	q.Int("replicas", c.Replicas)
	q.Str("storage", c.Storage)
	q.Str("name", c.Name)
	u.RawQuery = q.Encode()
	return u
}
