package rabbitmq

import (
	"context"
	"log/slog"
	"net/url"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/urlq"
)

// Config is the parsed form of a rabbitmq:// or amqps:// URL (see the
// package documentation for each parameter). ParseURL reads one;
// OpenConfig opens a driver from one. The zero value of each field means
// its default, the one the URL parameter has.
type Config struct {
	// Addr is the server's host:port. Defaults to 127.0.0.1:5672 (5671
	// with TLS).
	Addr string
	// User and Password authenticate (PLAIN). Both default to "guest"
	// when both are empty.
	User     string
	Password string
	// VHost is the virtual host. Defaults to "/".
	VHost string
	// TLS connects with TLS (the amqps scheme, or tls=true). ServerName,
	// CAFile, CertFile, KeyFile and TLSInsecureSkipVerify are the
	// server_name, ca_file, cert_file, key_file and
	// tls_insecure_skip_verify parameters; they need TLS.
	TLS                   bool
	ServerName            string
	CAFile                string
	CertFile              string
	KeyFile               string
	TLSInsecureSkipVerify bool
	// Namespace separates independent sets of lanes. Defaults to
	// DefaultNamespace.
	Namespace string
	// Prefetch is the consumers' prefetch. Defaults to DefaultPrefetch.
	Prefetch int
	// ConfirmWindow bounds unconfirmed publishes. Defaults to
	// DefaultConfirmWindow.
	ConfirmWindow int
	// DeliveryLimit is the quorum queues' delivery limit. Defaults to
	// DefaultDeliveryLimit.
	DeliveryLimit int
	// Heartbeat is the AMQP heartbeat. Defaults to DefaultHeartbeat.
	Heartbeat time.Duration
	// ConnectTimeout bounds connecting. Defaults to DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ConfirmTimeout bounds a publish's confirmation. Defaults to
	// DefaultConfirmTimeout.
	ConfirmTimeout time.Duration
	// IdleRelease is the idle_release parameter. Defaults to
	// DefaultIdleRelease.
	IdleRelease time.Duration
	// MaxMessageSize is the largest message. Defaults to
	// DefaultMaxMessageSize.
	MaxMessageSize int
	// ConnectionName names the connection (with the namespace). Defaults
	// to "switchyard".
	ConnectionName string
	// Logger receives the driver's warnings. Not set from the URL.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// ParseURL reads a rabbitmq:// or amqps:// URL. Errors match
// broker.ErrInvalid and never contain the password.
func ParseURL(u *url.URL) (*Config, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	return &Config{
		Addr: c.addr, User: c.user, Password: c.password, VHost: c.vhost,
		TLS: c.tlsParams.on, ServerName: c.tlsParams.serverName, CAFile: c.tlsParams.caFile,
		CertFile: c.tlsParams.certFile, KeyFile: c.tlsParams.keyFile, TLSInsecureSkipVerify: c.tlsParams.insecure,
		Namespace: c.namespace, Prefetch: c.prefetch, ConfirmWindow: c.confirmWindow, DeliveryLimit: c.deliveryLimit,
		Heartbeat: c.heartbeat, ConnectTimeout: c.connectTimeout, ConfirmTimeout: c.confirmTimeout,
		IdleRelease: c.idleRelease, MaxMessageSize: c.maxMessageSize, ConnectionName: c.connName,
	}, nil
}

// Open connects to the server named by u (rabbitmq:// or amqps://).
func Open(ctx context.Context, u *url.URL) (*Driver, error) {
	cfg, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	return openConfig(ctx, cfg, nil)
}

// OpenConfig connects with a configuration, as Open does with a URL: the
// configuration is checked by the same rules as the URL's parameters.
func OpenConfig(ctx context.Context, cfg *Config) (*Driver, error) {
	if cfg == nil {
		return nil, broker.Invalidf("rabbitmq: nil config")
	}
	c, err := parseURL(cfg.url())
	if err != nil {
		return nil, err
	}
	return openConfig(ctx, c, cfg.Logger)
}

// url renders c as the rabbitmq:// URL that parses to it; zero fields are
// left out, so that they take the parameters' defaults.
func (c *Config) url() *url.URL {
	u := &url.URL{Scheme: "rabbitmq", Host: c.Addr}
	if c.User != "" || c.Password != "" {
		u.User = url.UserPassword(c.User, c.Password)
	}
	if c.VHost != "" && c.VHost != "/" {
		u.Path = "/" + c.VHost
	}
	q := urlq.New()
	q.Bool("tls", c.TLS)
	q.Str("server_name", c.ServerName)
	q.Str("ca_file", c.CAFile)
	q.Str("cert_file", c.CertFile)
	q.Str("key_file", c.KeyFile)
	q.Bool("tls_insecure_skip_verify", c.TLSInsecureSkipVerify)
	q.Str("namespace", c.Namespace)
	q.Int("prefetch", c.Prefetch)
	q.Int("confirm_window", c.ConfirmWindow)
	q.Int("delivery_limit", c.DeliveryLimit)
	q.Dur("heartbeat", c.Heartbeat)
	q.Dur("connect_timeout", c.ConnectTimeout)
	q.Dur("confirm_timeout", c.ConfirmTimeout)
	q.Dur("idle_release", c.IdleRelease)
	q.Int("max_message_size", c.MaxMessageSize)
	q.Str("connection_name", c.ConnectionName)
	u.RawQuery = q.Encode()
	return u
}
