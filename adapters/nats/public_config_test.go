package nats

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
)

// TestConfig_RoundTrip: the Config ParseURL returns opens the driver the URL
// opens (OpenConfig checks it by the URL's rules: it renders the same
// parsed configuration).
func TestConfig_RoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"nats://",
		"nats://h",
		"nats://u:p%40ss@h:1/ns",
		"nats://tok@h:1/",
		"nats://h:1/?token=t&namespace=a.b:c&ack_wait=2s&max_deliver=-1&dedup_window=1m&pull_expiry=1s&publish_timeout=3s&connect_timeout=4s&max_ack_pending=7&max_batch=9&replicas=3&storage=memory&name=x",
		"nats://h:1/?creds=/c&nkey=/k&tls_ca=/ca&tls_cert=/c&tls_key=/k&tls_insecure=true",
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
		if *got != *want {
			t.Errorf("%s: round trip gives\n%+v\nwant\n%+v", s, *got, *want)
		}
	}
	// The zero Config is every default.
	def, _ := parseURL(&url.URL{Scheme: "nats"})
	if got, err := parseURL((&Config{}).url()); err != nil || *got != *def {
		t.Errorf("the zero Config gives %+v, %v; want the defaults %+v", got, err, def)
	}
}

func TestOpenConfig_Invalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []*Config{nil, {Password: "hunter22"}, {MaxBatch: -1}, {Storage: "tape"}, {AckWait: -1}} {
		if _, err := OpenConfig(ctx, c); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("OpenConfig(%+v) = %v; want ErrInvalid", c, err)
		}
	}
}

// TestOpenConfig_Live opens the test server with the Config ParseURL reads
// from its URL.
func TestOpenConfig_Live(t *testing.T) {
	t.Parallel()
	raw := strings.TrimSuffix(sharedEndpoint(t), "/") + "/?namespace=" + conformance.Namespace(t)
	t.Cleanup(func() { cleanupURL(raw) })
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
