package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// testURL turns the test RabbitMQ endpoint (amqp://user:pass@host:port/vhost)
// into a rabbitmq:// URL for namespace ns with extra query parameters. user
// and pass, when set, replace the endpoint's credentials.
func testURL(t testing.TB, ns, user, pass string, extra url.Values) string {
	t.Helper()
	ep := testenv.RabbitMQ.Endpoint(t)
	u, err := url.Parse(ep)
	if err != nil {
		t.Fatalf("test endpoint does not parse")
	}
	switch u.Scheme {
	case "amqp":
		u.Scheme = "rabbitmq"
	case "amqps":
	default:
		t.Fatalf("test endpoint scheme %q is not amqp or amqps", u.Scheme)
	}
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	q := url.Values{}
	for k, v := range extra {
		q[k] = v
	}
	q.Set("namespace", ns)
	u.RawQuery = q.Encode()
	return u.String()
}

// randHex returns n random bytes as hex.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// openDriver opens a *Driver for rawURL and closes it at the end of the test.
func openDriver(t testing.TB, rawURL string) *Driver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := broker.OpenDriver(ctx, rawURL)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d.(*Driver)
}

// injectRaw publishes body as it is to the lane's work queue.
func (d *Driver) injectRaw(ctx context.Context, lane string, body []byte) error {
	const op = "rabbitmq: inject"
	if err := d.declareLane(ctx, op, lane); err != nil {
		return err
	}
	return d.pub.sendOne(ctx, op, outMsg{queue: d.cfg.workQueue(lane), pub: amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}})
}

// cleanupNamespace deletes the queues of lanes in the namespace of rawURL.
func cleanupNamespace(rawURL string, lanes ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := broker.OpenDriver(ctx, rawURL)
	if err != nil {
		return
	}
	defer d.Close()
	_ = d.(*Driver).deleteLanes(ctx, lanes...)
}

// rabbitmqctl runs the broker's control tool (available on the test
// machine's shared RabbitMQ).
func rabbitmqctl(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl %s: %v: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// needCtl skips when rabbitmqctl cannot reach the broker (a remote
// endpoint), failing instead under SWITCHYARD_REQUIRE_BROKERS=1.
func needCtl(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rabbitmqctl(ctx, "status"); err != nil {
		if testenv.RequireBrokers() {
			t.Fatalf("rabbitmqctl is needed for this test: %v", err)
		}
		t.Skipf("rabbitmqctl cannot reach the broker, so this test cannot close connections: %v", err)
	}
}

// tempUser creates a RabbitMQ user with full permissions on vhost "/" for
// this test and deletes it at the end. Tests that disrupt connections use
// one so that they touch no one else's.
func tempUser(t testing.TB) (user, pass string) {
	t.Helper()
	needCtl(t)
	user, pass = "switchyard-test-"+randHex(4), randHex(12)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := rabbitmqctl(ctx, "add_user", user, pass); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = rabbitmqctl(ctx, "delete_user", user)
	})
	if err := rabbitmqctl(ctx, "set_permissions", "-p", "/", user, ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	return user, pass
}

// closeUserConnections makes the broker close every connection of user, as
// `rabbitmqctl close_all_connections` does for all of them.
func closeUserConnections(ctx context.Context, user string) error {
	return rabbitmqctl(ctx, "close_all_user_connections", user, "switchyard test: forced close")
}

func newNS(t testing.TB) string { return conformance.Namespace(t) }
