package nats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

var nsClean = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// testNamespace is a fresh namespace for one test.
func testNamespace(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := nsClean.ReplaceAllString(t.Name(), "_")
	if len(n) > 40 {
		n = n[:40]
	}
	return n + "_" + hex.EncodeToString(b[:])
}

// testURL is a nats:// URL for endpoint with a fresh namespace and params.
func testURL(t testing.TB, endpoint string, params string) string {
	u := strings.TrimSuffix(endpoint, "/") + "/?namespace=" + testNamespace(t)
	if params != "" {
		u += "&" + params
	}
	return u
}

// sharedEndpoint is the machine's NATS server (skips or fails with the
// reason when there is none).
func sharedEndpoint(t testing.TB) string {
	t.Helper()
	return testenv.NATS.Endpoint(t)
}

// openBroker opens a Broker on rawURL, deletes the namespace's streams and
// closes it at the end of the test.
func openBroker(t testing.TB, rawURL string, opts *broker.Options) *broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, rawURL, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	d := b.Driver().(*Driver)
	live, dlq, adv := d.StreamNames()
	server := d.cfg.server
	t.Cleanup(func() {
		b.Close()
		deleteStreams(server, live, dlq, adv)
	})
	return b
}

// deleteStreams removes a test namespace's streams (best effort).
func deleteStreams(server string, names ...string) {
	nc, err := natsgo.Connect(server, natsgo.Timeout(2*time.Second))
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, n := range names {
		_ = js.DeleteStream(ctx, n)
	}
}

func driverOf(b *broker.Broker) *Driver { return b.Driver().(*Driver) }

// injectRaw publishes body to the lane's live subject as a foreign
// publisher would.
func injectRaw(ctx context.Context, d *Driver, lane string, body []byte) error {
	_, err := d.js.Publish(ctx, d.LiveSubject(lane), body)
	return err
}

// privateServer is a nats-server of the test's own, on a free port with
// its own store directory, that the test may stop and start.
type privateServer struct {
	t      testing.TB
	port   int
	dir    string
	binary string
	args   []string // extra server flags (auth, TLS)
	probe  []natsgo.Option
	cmd    *exec.Cmd
}

const natsServerBin = "/usr/sbin/nats-server"

// startPrivateServer starts a JetStream server on a free loopback port. It
// skips (or fails, with SWITCHYARD_REQUIRE_BROKERS=1) when the binary is
// missing.
func startPrivateServer(t testing.TB) *privateServer {
	t.Helper()
	return startPrivateServerWith(t, nil)
}

// startPrivateServerWith starts a private server with extra flags; probe
// are the client options (credentials, TLS) its readiness check needs.
func startPrivateServerWith(t testing.TB, probe []natsgo.Option, extraArgs ...string) *privateServer {
	t.Helper()
	bin := natsServerBin
	if _, err := os.Stat(bin); err != nil {
		if p, err2 := exec.LookPath("nats-server"); err2 == nil {
			bin = p
		} else if testenv.RequireBrokers() {
			t.Fatalf("nats-server is required for this test but not found at %s or on PATH", natsServerBin)
		} else {
			t.Skipf("nats-server not found at %s or on PATH: this test needs a private server it can stop and start", natsServerBin)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &privateServer{t: t, port: port, dir: t.TempDir(), args: extraArgs, probe: probe}
	s.binary = bin
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

func (s *privateServer) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// Start runs the server and waits until it accepts connections.
func (s *privateServer) Start() {
	s.t.Helper()
	args := append([]string{"-a", "127.0.0.1", "-p", fmt.Sprint(s.port), "-js", "-sd", s.dir}, s.args...)
	s.cmd = exec.Command(s.binary, args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		nc, err := natsgo.Connect(s.URL(), append([]natsgo.Option{natsgo.Timeout(time.Second)}, s.probe...)...)
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
			nc.Close()
			if err == nil {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("private nats-server on port %d did not become ready", s.port)
}

// Stop terminates the server (SIGTERM, then SIGKILL after 5 s) and waits.
func (s *privateServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// rawJS is a plain client for checks behind the driver's back.
func rawJS(t testing.TB, endpoint string) (*natsgo.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := natsgo.Connect(endpoint, natsgo.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
