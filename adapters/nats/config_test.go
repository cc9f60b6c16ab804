package nats

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want func(c *config) string // "" when c is right
	}{
		{"nats://127.0.0.1:4222", func(c *config) string {
			if c.server != "nats://127.0.0.1:4222" || c.namespace != DefaultNamespace || c.ackWait != DefaultAckWait ||
				c.maxDeliver != DefaultMaxDeliver || c.dedupWindow != DefaultDedupWindow || c.pullExpiry != DefaultPullExpiry ||
				c.storage != jetstream.FileStorage || c.tls {
				return "defaults wrong"
			}
			return ""
		}},
		{"nats://h", func(c *config) string {
			if c.server != "nats://h:4222" {
				return "default port not added: " + c.server
			}
			return ""
		}},
		{"nats://u:p%40ss@h:1/ns1", func(c *config) string {
			if c.user != "u" || c.password != "p@ss" || c.namespace != "ns1" || c.server != "nats://h:1" {
				return "credentials or path namespace wrong"
			}
			return ""
		}},
		{"nats://s3cr3t@h:1/?namespace=x", func(c *config) string {
			if c.token != "s3cr3t" || c.user != "" || c.namespace != "x" {
				return "token form wrong"
			}
			return ""
		}},
		{"nats://h:1/?ack_wait=2s&max_deliver=-1&dedup_window=10m&pull_expiry=1s&publish_timeout=3s&max_ack_pending=-1&max_batch=50&replicas=3&storage=memory&name=w1", func(c *config) string {
			if c.ackWait != 2*time.Second || c.maxDeliver != -1 || c.dedupWindow != 10*time.Minute || c.pullExpiry != time.Second ||
				c.publishTimeout != 3*time.Second || c.maxAckPending != -1 || c.maxBatch != 50 || c.replicas != 3 ||
				c.storage != jetstream.MemoryStorage || c.name != "w1" {
				return "tuning parameters wrong"
			}
			return ""
		}},
		{"nats://h:1/?tls=true", func(c *config) string {
			if !c.tls {
				return "tls not set"
			}
			return ""
		}},
		{"nats://h:1/?tls_ca=/x/ca.pem", func(c *config) string {
			if !c.tls || c.tlsCA != "/x/ca.pem" {
				return "tls_ca does not imply tls"
			}
			return ""
		}},
		{"nats://h:1/?namespace=a.b:c", func(c *config) string {
			if c.nsToken == "a.b:c" || strings.ContainsAny(c.nsToken, ".:*> ") {
				return "namespace not mapped to a token: " + c.nsToken
			}
			return ""
		}},
	}
	for _, tc := range tests {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		c, err := parseURL(u)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if msg := tc.want(c); msg != "" {
			t.Errorf("%s: %s", tc.in, msg)
		}
	}
}

func TestParseURL_Errors(t *testing.T) {
	t.Parallel()
	bad := []string{
		"nats://u:hunter22@h:1/?bogus=1",
		"nats://u:hunter22@h:1/?ack_wait=fast",
		"nats://u:hunter22@h:1/?ack_wait=10ms",
		"nats://u:hunter22@h:1/?max_deliver=0",
		"nats://u:hunter22@h:1/?pull_expiry=2m",
		"nats://u:hunter22@h:1/?storage=tape",
		"nats://u:hunter22@h:1/?tls_cert=/a",
		"nats://u:hunter22@h:1/?max_batch=0",
		"nats://u:hunter22@h:1/?replicas=9",
		"nats://u:hunter22@h:1/ns?namespace=other",
		"nats://u:hunter22@h:1,h2:2/",
		"nats://u:hunter22@h:1/?ack_wait=1s&ack_wait=2s",
		"nats://hunter22@h:1/?token=hunter22",
		"nats:hunter22",
	}
	for _, s := range bad {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		_, err = parseURL(u)
		if !errors.Is(err, broker.ErrInvalid) || !errors.Is(err, broker.ErrPermanent) {
			t.Errorf("%s: error %v, want permanent ErrInvalid", s, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter22") {
			t.Errorf("%s: the error shows the secret: %v", s, err)
		}
	}
}

// TestOpen_CredentialsNeverInErrors: connection failures name the server
// but not the password or token.
func TestOpen_CredentialsNeverInErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []string{
		"nats://alice:hunter22@127.0.0.1:1/?connect_timeout=500ms",
		"nats://hunter22tok@127.0.0.1:1/?connect_timeout=500ms",
	} {
		_, err := broker.OpenDriver(ctx, s)
		if err == nil {
			t.Fatalf("%s: opened a server that is not there", s)
		}
		if strings.Contains(err.Error(), "hunter22") {
			t.Errorf("the error shows the secret: %v", err)
		}
		if !errors.Is(err, broker.ErrTransient) {
			t.Errorf("connection refused: %v, want transient", err)
		}
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"interactive", "human-review", "a_b", "Z9"} {
		if token(s) != s {
			t.Errorf("token(%q) = %q, want it unchanged", s, token(s))
		}
	}
	seen := map[string]string{}
	for _, s := range []string{"a.b", "a_b", "a:b", "a..b", "a.", "x.y.z", "a b"} {
		tok := token(s)
		for i := 0; i < len(tok); i++ {
			if !tokenByte(tok[i]) {
				t.Errorf("token(%q) = %q has %q", s, tok, tok[i])
			}
		}
		if o, dup := seen[tok]; dup {
			t.Errorf("token(%q) = token(%q) = %q", s, o, tok)
		}
		seen[tok] = s
	}
}
