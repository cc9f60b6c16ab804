package redisstreams

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

func TestParseURL_Defaults(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("redis-streams://")
	c, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:6379" || c.DB != 0 || c.Prefix != DefaultPrefix || c.Namespace != DefaultNamespace || c.Consumer != DefaultConsumer ||
		c.DedupWindow != DefaultDedupWindow || c.MaxMessageSize != DefaultMaxMessageSize || c.MaxBatch != DefaultMaxBatch || c.MaxLen != 0 || c.Poll != DefaultPoll || c.TLS != nil {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestParseURL_Params(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("redis-streams://bob:s3cret@example.com:6380/3?namespace=prod&prefix=app&consumer=w1&dedup_window=0s&max_message_size=2048&max_batch=10&max_len=99&poll=50ms&tls=true&tls_server_name=x.example")
	c, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "example.com:6380" || c.Username != "bob" || c.Password != "s3cret" || c.DB != 3 || c.Namespace != "prod" || c.Prefix != "app" ||
		c.Consumer != "w1" || c.DedupWindow != 0 || c.MaxMessageSize != 2048 || c.MaxBatch != 10 || c.MaxLen != 99 || c.Poll != 50*time.Millisecond ||
		c.TLS == nil || c.TLS.ServerName != "x.example" {
		t.Fatalf("parsed = %+v", c)
	}
	if k := newKeys(c.Prefix, c.Namespace).queue("batch", false); k.stream != "app:{prod}:l:batch:s" {
		t.Fatalf("stream key = %s", k.stream)
	}
}

// TestParseURL_Bad: every malformed URL is ErrInvalid, names the problem
// and never quotes the password.
func TestParseURL_Bad(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"redis://h", "redis-streams:opaque", "redis-streams://h:0", "redis-streams://h:99999", "redis-streams://h/x",
		"redis-streams://h/-1", "redis-streams://h?no_such=1", "redis-streams://h?namespace=a{b}", "redis-streams://h?namespace=",
		"redis-streams://h?prefix=:x", "redis-streams://h?consumer=a%20b", "redis-streams://h?max_message_size=0",
		"redis-streams://h?max_message_size=999999999999", "redis-streams://h?max_batch=0", "redis-streams://h?max_batch=6000",
		"redis-streams://h?max_len=-1", "redis-streams://h?poll=1ms", "redis-streams://h?poll=2m", "redis-streams://h?dial_timeout=1ms",
		"redis-streams://h?pool_size=-1", "redis-streams://h?tls_insecure_skip_verify=true", "redis-streams://h?namespace=a&namespace=b",
		"redis-streams://h?dedup_window=-1s", "redis-streams://u:hunter22@h?max_batch=x",
	} {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("%s does not parse: %v", s, err)
		}
		_, err = ParseURL(u)
		if !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("ParseURL(%s) = %v, want ErrInvalid", s, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter22") {
			t.Errorf("ParseURL(%s) = %v quotes the password", s, err)
		}
	}
}

// TestOpen_Unreachable: a server that does not answer is a transient
// error at Open, within the dial timeout, and the password is not in it.
func TestOpen_Unreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = broker.Open(ctx, "redis-streams://u:hunter22@"+addr+"/0?dial_timeout=500ms", nil)
	if err == nil || !errors.Is(err, broker.ErrTransient) {
		t.Fatalf("open of a closed port = %v, want a transient error", err)
	}
	if strings.Contains(err.Error(), "hunter22") {
		t.Fatalf("error quotes the password: %v", err)
	}
}

// TestOpen_Registered: broker.Open knows the scheme through the registry.
func TestOpen_Registered(t *testing.T) {
	t.Parallel()
	found := false
	for _, s := range broker.Schemes() {
		found = found || s == "redis-streams"
	}
	if !found {
		t.Fatalf("redis-streams is not among the registered schemes %v", broker.Schemes())
	}
}
