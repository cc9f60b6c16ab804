package switchyardtest_test

import (
	"bufio"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/switchyardtest"
)

// These tests take their endpoints the way a user's CI job does: from
// SWITCHYARD_RABBITMQ_URL, SWITCHYARD_REDIS_ADDR, SWITCHYARD_NATS_URL and
// SWITCHYARD_POSTGRES_DSN (.ci/run sets them). Each speaks the first words
// of the protocol, so an endpoint that answers TCP but is not the service
// fails.

func connect(t *testing.T, endpoint string) net.Conn {
	t.Helper()
	hostport := endpoint
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		hostport = u.Host
	}
	c, err := net.DialTimeout("tcp", hostport, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func TestRedis_FromEnvironment(t *testing.T) {
	c := connect(t, switchyardtest.Redis(t))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING answered %q, %v", line, err)
	}
}

func TestNATS_FromEnvironment(t *testing.T) {
	c := connect(t, switchyardtest.NATS(t))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO {") {
		t.Fatalf("NATS greeting %q, %v", line, err)
	}
}

func TestRabbitMQ_FromEnvironment(t *testing.T) {
	c := connect(t, switchyardtest.RabbitMQ(t))
	if _, err := c.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		t.Fatal(err)
	}
	var frame [7]byte
	if _, err := io.ReadFull(c, frame[:]); err != nil {
		t.Fatal(err)
	}
	if frame[0] != 1 { // a method frame: connection.start
		t.Fatalf("RabbitMQ answered frame type %d, want 1 (method)", frame[0])
	}
}

func TestPostgres_FromEnvironment(t *testing.T) {
	c := connect(t, switchyardtest.Postgres(t))
	// SSLRequest: length 8, code 80877103; the server answers 'S' or 'N'.
	if _, err := c.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || (b[0] != 'S' && b[0] != 'N') {
		t.Fatalf("PostgreSQL answered %q, %v", b[0], err)
	}
}
