// Package redisproc runs a redis-server of a test's own, on a free loopback
// port and a temporary directory, with AOF persistence, so that the Redis
// adapters' tests (adapters/asynq, adapters/redisstreams) can stop, kill,
// freeze and restart it. The shared Redis on 6379 is never touched.
package redisproc

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// Server is a private redis-server.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	// fsync is the appendfsync policy: "everysec" (Redis's default) or
	// "always".
	fsync string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start starts a server with appendfsync policy fsync ("everysec" or
// "always"), stopped when the test ends, or skips the test (fails it under
// SWITCHYARD_REQUIRE_BROKERS=1) when redis-server is not installed.
func Start(t testing.TB, fsync string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if testenv.RequireBrokers() {
			t.Fatalf("redis-server is required for the restart and outage tests: %v", err)
		}
		t.Skipf("redis-server not on PATH (%v); the restart and outage tests need a private server to stop", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := &Server{t: t, bin: bin, dir: t.TempDir(), port: port, fsync: fsync}
	if err := p.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

// Addr is the server's host:port.
func (p *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// URL returns a scheme:// URL (redis, redis-streams) for the server's
// database 0 with the query appended.
func (p *Server) URL(scheme, query string) string {
	return scheme + "://" + p.Addr() + "/0?" + query
}

// Restart starts the server again on the same port and data (a no-op while
// it runs) and waits until it answers.
func (p *Server) Restart(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	cmd := exec.Command(p.bin, "--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--appendonly", "yes", "--appendfsync", p.fsync, "--dir", p.dir, "--save", "",
		"--daemonize", "no", "--logfile", "redis.log")
	cmd.Dir = p.dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	p.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(p.dir + "/redis.log")
			return fmt.Errorf("private redis-server on %d did not answer: %v\n%s", p.port, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down gracefully (SIGTERM: the AOF is flushed) and
// waits for it to exit.
func (p *Server) Stop() error { return p.signal(syscall.SIGTERM) }

// Kill stops the server with SIGKILL, as a crash or power loss would:
// only what the AOF's fsync policy already wrote survives.
func (p *Server) Kill() error { return p.signal(syscall.SIGKILL) }

func (p *Server) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
	return nil
}

// Disrupt is a conformance Harness.Disrupt: it stops the server and
// returns the function that starts it again on the same port and data.
func (p *Server) Disrupt(ctx context.Context) (func(context.Context) error, error) {
	if err := p.Stop(); err != nil {
		return nil, err
	}
	return p.Restart, nil
}

// Freeze stops the server process with SIGSTOP: connections stay open but
// nothing answers, the worst case for a client without timeouts. Thaw
// resumes it.
func (p *Server) Freeze() error {
	if err := p.sendOnly(syscall.SIGSTOP); err != nil {
		return err
	}
	// Signals are asynchronous: wait until the kernel reports the process
	// stopped (state T), so no call races the freeze.
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil
		}
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("redis-server %d did not stop", pid)
}

// Thaw resumes a frozen server.
func (p *Server) Thaw() error { return p.sendOnly(syscall.SIGCONT) }

func (p *Server) sendOnly(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("private redis-server is not running")
	}
	return p.cmd.Process.Signal(sig)
}
