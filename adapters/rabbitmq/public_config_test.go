package rabbitmq

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
)

// comparable returns c without the fields a rendered URL cannot repeat
// byte for byte: its redacted text and the built TLS configuration
// (compared by what it was built from, tlsParams).
func comparableConfig(c *config) config {
	o := *c
	o.redacted, o.tls = "", nil
	return o
}

// TestConfig_RoundTrip: the Config ParseURL returns opens the driver the URL
// opens (OpenConfig checks it by the URL's rules: it renders the same
// parsed configuration).
func TestConfig_RoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"rabbitmq://",
		"rabbitmq://h",
		"rabbitmq://bob@h:1/",
		"rabbitmq://bob:p%40ss@[::1]:1/vh",
		"rabbitmq://h/%2F",
		"amqps://h",
		"rabbitmq://h/?tls=true&server_name=s&tls_insecure_skip_verify=true",
		"rabbitmq://h/?namespace=ns&prefetch=5&confirm_window=6&delivery_limit=7&heartbeat=2s&connect_timeout=3s&confirm_timeout=4s&idle_release=5ms&max_message_size=1000&connection_name=c",
	} {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		want, err := parseURL(u)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		cfg, err := ParseURL(u)
		if err != nil {
			t.Fatalf("%s: ParseURL: %v", s, err)
		}
		got, err := parseURL(cfg.url())
		if err != nil {
			t.Fatalf("%s: the rendered config does not parse: %v", s, err)
		}
		if comparableConfig(got) != comparableConfig(want) || (got.tls == nil) != (want.tls == nil) {
			t.Errorf("%s: round trip gives\n%+v\nwant\n%+v", s, comparableConfig(got), comparableConfig(want))
		}
		if got.tls != nil && (got.tls.ServerName != want.tls.ServerName || got.tls.InsecureSkipVerify != want.tls.InsecureSkipVerify) {
			t.Errorf("%s: TLS settings differ after the round trip", s)
		}
	}
	def, _ := parseURL(&url.URL{Scheme: "rabbitmq"})
	if got, err := parseURL((&Config{}).url()); err != nil || comparableConfig(got) != comparableConfig(def) {
		t.Errorf("the zero Config gives %+v, %v; want the defaults %+v", got, err, def)
	}
}

func TestOpenConfig_Invalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []*Config{nil, {Prefetch: -1}, {ServerName: "s"}, {CertFile: "/c", TLS: true}, {Heartbeat: -1}} {
		if _, err := OpenConfig(ctx, c); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("OpenConfig(%+v) = %v; want ErrInvalid", c, err)
		}
	}
}

// TestOpenConfig_Live opens the test server with the Config ParseURL reads
// from its URL.
func TestOpenConfig_Live(t *testing.T) {
	t.Parallel()
	raw := testURL(t, conformance.Namespace(t), "", "", nil)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	d, err := OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("OpenConfig: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}
