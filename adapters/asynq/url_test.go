package asynq_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	asynqadapter "github.com/switchyard-dev/switchyard/adapters/asynq"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/redisproc"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url   string
		check func(t *testing.T, c *asynqadapter.Config)
	}{
		{"redis://", func(t *testing.T, c *asynqadapter.Config) {
			if c.Addr != "127.0.0.1:6379" || c.DB != 0 || c.TLS != nil || c.Namespace != "" {
				t.Errorf("defaults: %+v", c)
			}
			if c.DedupWindow != 24*time.Hour || c.MaxMessageSize != 1<<20 || c.MaxBatch != 500 || c.Poll != 50*time.Millisecond {
				t.Errorf("defaults: %+v", c)
			}
			if c.ArchiveMaxSize != 0 || c.ArchiveMaxAge != 0 {
				t.Errorf("archive caps default to none: %+v", c)
			}
		}},
		{"redis://:s3cret@redis.example:6380/3?namespace=prod", func(t *testing.T, c *asynqadapter.Config) {
			if c.Addr != "redis.example:6380" || c.Password != "s3cret" || c.Username != "" || c.DB != 3 || c.Namespace != "prod" {
				t.Errorf("got %+v", c)
			}
		}},
		{"redis://app:pw@h/0", func(t *testing.T, c *asynqadapter.Config) {
			if c.Username != "app" || c.Password != "pw" || c.Addr != "h:6379" {
				t.Errorf("got %+v", c)
			}
		}},
		{"rediss://h:6390?tls_server_name=cache.internal", func(t *testing.T, c *asynqadapter.Config) {
			if c.TLS == nil || c.TLS.ServerName != "cache.internal" || c.TLS.InsecureSkipVerify {
				t.Errorf("TLS = %+v", c.TLS)
			}
		}},
		{"rediss://h", func(t *testing.T, c *asynqadapter.Config) {
			if c.TLS == nil || c.TLS.ServerName != "h" {
				t.Errorf("TLS = %+v", c.TLS)
			}
		}},
		{"redis://h?dedup_window=0s&archive_max_size=50000&archive_max_age=720h&poll=5ms&max_batch=100&pool_size=20&read_timeout=1s", func(t *testing.T, c *asynqadapter.Config) {
			if c.DedupWindow != 0 || c.ArchiveMaxSize != 50000 || c.ArchiveMaxAge != 720*time.Hour || c.Poll != 5*time.Millisecond ||
				c.MaxBatch != 100 || c.PoolSize != 20 || c.ReadTimeout != time.Second {
				t.Errorf("got %+v", c)
			}
		}},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		c, err := asynqadapter.ParseURL(u)
		if err != nil {
			t.Errorf("%s: %v", tt.url, err)
			continue
		}
		tt.check(t, c)
	}
}

func TestParseURL_Errors(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"redis://:hunter2@h/notanumber",
		"redis://:hunter2@h/-1",
		"redis://:hunter2@h:99999/0",
		"redis://:hunter2@h/0?nope=1",
		"redis://:hunter2@h/0?namespace=bad%20ns",
		"redis://:hunter2@h/0?max_batch=0",
		"redis://:hunter2@h/0?poll=abc",
		"redis://:hunter2@h/0?read_timeout=1ms",
		"redis://:hunter2@h/0?tls_insecure_skip_verify=true",
		"redis://:hunter2@h/0?archive_max_size=-5",
		"amqp://:hunter2@h/0",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = asynqadapter.ParseURL(u)
		if !errors.Is(err, broker.ErrInvalid) || !errors.Is(err, broker.ErrPermanent) {
			t.Errorf("%s: error %v, want ErrInvalid", broker.Redact(u), err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error text contains the password: %v", err)
		}
	}
}

// TestOpen_Credentials: the right password opens; a wrong one and an
// unreachable server give classified errors without the password, within
// bounded time. It sets a password on a private redis-server.
func TestOpen_Credentials(t *testing.T) {
	t.Parallel()
	p := redisproc.Start(t, "everysec")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	if err := c.ConfigSet(ctx, "requirepass", "c0rrect-pa55").Err(); err != nil {
		t.Fatal(err)
	}
	c.Close()

	b, err := broker.Open(ctx, "redis://:c0rrect-pa55@"+p.Addr()+"/2", nil)
	if err != nil {
		t.Fatalf("open with the right password: %v", err)
	}
	if _, err := b.Stats(ctx, "batch"); err != nil {
		t.Errorf("stats: %v", err)
	}
	b.Close()

	for _, raw := range []string{"redis://:wr0ng-pa55@" + p.Addr() + "/0", "redis://" + p.Addr() + "/0"} {
		_, err = broker.Open(ctx, raw, nil)
		if err == nil {
			t.Fatal("open with a wrong or missing password succeeded")
		}
		if !errors.Is(err, broker.ErrPermanent) {
			t.Errorf("auth failure %v is not permanent", err)
		}
		if strings.Contains(err.Error(), "wr0ng-pa55") || strings.Contains(err.Error(), "c0rrect-pa55") {
			t.Errorf("error text contains a password: %v", err)
		}
	}

	start := time.Now()
	_, err = broker.Open(ctx, "redis://:wr0ng-pa55@127.0.0.1:1/0?dial_timeout=500ms", nil)
	if err == nil || !errors.Is(err, broker.ErrTransient) {
		t.Errorf("unreachable server: %v, want a transient error", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("open of an unreachable server took %s", el)
	}
	if err != nil && strings.Contains(err.Error(), "wr0ng-pa55") {
		t.Errorf("error text contains the password: %v", err)
	}
}
