package rabbitmq

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url   string
		check func(t *testing.T, c *config)
	}{
		{"rabbitmq://", func(t *testing.T, c *config) {
			if c.addr != "127.0.0.1:5672" || c.user != "guest" || c.password != "guest" || c.vhost != "/" || c.tls != nil {
				t.Errorf("defaults: %+v", c)
			}
			if c.namespace != DefaultNamespace || c.prefetch != DefaultPrefetch || c.confirmWindow != DefaultConfirmWindow || c.deliveryLimit != DefaultDeliveryLimit {
				t.Errorf("tuning defaults: %+v", c)
			}
		}},
		{"rabbitmq://alice:s3cret@mq.local:5673/prod?namespace=billing&prefetch=10&confirm_window=50&delivery_limit=7&heartbeat=5s", func(t *testing.T, c *config) {
			if c.addr != "mq.local:5673" || c.user != "alice" || c.password != "s3cret" || c.vhost != "prod" {
				t.Errorf("got %+v", c)
			}
			if c.namespace != "billing" || c.prefetch != 10 || c.confirmWindow != 50 || c.deliveryLimit != 7 || c.heartbeat != 5*time.Second {
				t.Errorf("tuning: %+v", c)
			}
			if c.workQueue("batch") != "switchyard.billing.batch" || c.deadQueue("batch") != "switchyard.billing.batch.dlq" {
				t.Errorf("queue names: %s %s", c.workQueue("batch"), c.deadQueue("batch"))
			}
		}},
		{"rabbitmq://u:p@h/%2F", func(t *testing.T, c *config) {
			if c.vhost != "/" {
				t.Errorf("vhost %q, want /", c.vhost)
			}
		}},
		{"amqps://u:p@h", func(t *testing.T, c *config) {
			if c.tls == nil || c.addr != "h:5671" || c.tls.ServerName != "h" || c.dialURL() != "amqps://h:5671/" {
				t.Errorf("amqps: addr %s tls %v", c.addr, c.tls)
			}
		}},
		{"rabbitmq://u:p@h?tls=true&server_name=mq.example", func(t *testing.T, c *config) {
			if c.tls == nil || c.addr != "h:5671" || c.tls.ServerName != "mq.example" {
				t.Errorf("tls=true: addr %s tls %v", c.addr, c.tls)
			}
		}},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		c, err := parseURL(u)
		if err != nil {
			t.Errorf("%s: %v", tt.url, err)
			continue
		}
		tt.check(t, c)
		if strings.Contains(c.dialURL(), "@") {
			t.Errorf("%s: dial URL %q carries credentials", tt.url, c.dialURL())
		}
	}
}

func TestParseURL_Invalid(t *testing.T) {
	t.Parallel()
	bad := []string{
		"rabbitmq://u:hunter2@h?bogus=1",
		"rabbitmq://u:hunter2@h?prefetch=0",
		"rabbitmq://u:hunter2@h?prefetch=abc",
		"rabbitmq://u:hunter2@h?confirm_window=-1",
		"rabbitmq://u:hunter2@h?delivery_limit=0",
		"rabbitmq://u:hunter2@h?heartbeat=fast",
		"rabbitmq://u:hunter2@h?namespace=bad%20name",
		"rabbitmq://u:hunter2@h?ca_file=/x.pem",
		"rabbitmq://u:hunter2@h?tls=true&cert_file=/c.pem",
		"amqps://u:hunter2@h?tls=false",
		"amqps://u:hunter2@h?ca_file=/does/not/exist.pem",
		"rabbitmq://u:hunter2@h?max_message_size=0",
		"rabbitmq://u:hunter2@h?prefetch=1&prefetch=2",
	}
	for _, s := range bad {
		_, err := broker.OpenDriver(context.Background(), s)
		if err == nil {
			t.Errorf("%s: no error", s)
			continue
		}
		if !errors.Is(err, broker.ErrInvalid) || broker.ClassOf(err) != broker.Permanent {
			t.Errorf("%s: %v is not a permanent ErrInvalid", s, err)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error leaks the password: %v", s, err)
		}
	}
}

func TestCheckLane(t *testing.T) {
	t.Parallel()
	c := &config{namespace: strings.Repeat("n", 128)}
	if err := c.checkLane(strings.Repeat("l", 128)); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("over-long queue names: %v, want ErrInvalid", err)
	}
	c.namespace = "ns"
	if err := c.checkLane("batch"); err != nil {
		t.Errorf("batch: %v", err)
	}
}

func TestBucketFor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ d, want time.Duration }{
		{time.Millisecond, 100 * time.Millisecond},
		{100 * time.Millisecond, 100 * time.Millisecond},
		{101 * time.Millisecond, 200 * time.Millisecond},
		{time.Second, 1600 * time.Millisecond},
		{2500 * time.Millisecond, 3200 * time.Millisecond},
		{MaxDelay, delayBuckets[len(delayBuckets)-1]},
	} {
		if got := bucketFor(tt.d); got != tt.want {
			t.Errorf("bucketFor(%s) = %s, want %s", tt.d, got, tt.want)
		}
	}
	if last := delayBuckets[len(delayBuckets)-1]; last < MaxDelay {
		t.Errorf("largest bucket %s is below MaxDelay %s", last, MaxDelay)
	}
	if got := expiration(1500 * time.Microsecond); got != "2" {
		t.Errorf("expiration rounds %q, want up to 2", got)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	if err := classify("op", nil); err != nil {
		t.Errorf("nil: %v", err)
	}
	ctxErr := classify("op", context.DeadlineExceeded)
	if !errors.Is(ctxErr, context.DeadlineExceeded) || broker.ClassOf(ctxErr) != broker.Transient {
		t.Errorf("context error: %v (%s)", ctxErr, broker.ClassOf(ctxErr))
	}
	if broker.ClassOf(classify("op", errors.New("mystery"))) != broker.Transient {
		t.Error("unrecognised errors must be transient")
	}
}

// TestOpen_BadCredentials: a refused login is permanent and its error does
// not repeat the password.
func TestOpen_BadCredentials(t *testing.T) {
	t.Parallel()
	u := testURL(t, newNS(t), "guest", "wrong-hunter2", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := broker.OpenDriver(ctx, u)
	if err == nil {
		d.Close()
		t.Fatal("opened with a wrong password")
	}
	if strings.Contains(err.Error(), "wrong-hunter2") {
		t.Errorf("error leaks the password: %v", err)
	}
	if broker.ClassOf(err) != broker.Permanent {
		t.Errorf("refused login classified %s: %v", broker.ClassOf(err), err)
	}
}

// TestOpen_Unreachable: nothing listening gives a transient error without
// the password.
func TestOpen_Unreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := broker.OpenDriver(ctx, "rabbitmq://u:hunter2@127.0.0.1:1/?connect_timeout=2s")
	if err == nil {
		t.Fatal("opened a closed port")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error leaks the password: %v", err)
	}
	if broker.ClassOf(err) != broker.Transient {
		t.Errorf("connection refused classified %s: %v", broker.ClassOf(err), err)
	}
}
