package conformance

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Environment variables that turn a re-executed test binary into the crash
// case's child.
const (
	childEnv     = "SWITCHYARD_CONFORMANCE_CHILD"
	childURLEnv  = "SWITCHYARD_CONFORMANCE_URL"
	childLaneEnv = "SWITCHYARD_CONFORMANCE_LANE"
)

// maybeChild runs the child's part of the crash case when this process is
// that child, and never returns in that case.
func maybeChild() bool {
	switch mode := os.Getenv(childEnv); mode {
	case "crash":
		os.Exit(crashChild())
	case "e2e-step", "e2e-effect":
		os.Exit(crashChildE2E(mode))
	case "e2e-cancel":
		os.Exit(crashChildCancel())
	case "chaos":
		os.Exit(chaosWorker())
	case "fleet-publisher":
		os.Exit(fleetPublisher())
	case "fleet-consumer":
		os.Exit(fleetConsumer())
	}
	return false
}

// noSpawnFromChild stops a child process from starting children of its own
// (which would multiply without bound).
func noSpawnFromChild(t testing.TB) {
	if os.Getenv(childEnv) != "" {
		t.Fatalf("refusing to start a child process from a child (%s=%s)", childEnv, os.Getenv(childEnv))
	}
}

// crashChild leases one message, reports it on stdout and then waits to be
// killed. It exits non-zero only on failure.
func crashChild() int {
	ctx := context.Background()
	b, err := broker.Open(ctx, os.Getenv(childURLEnv), nil)
	if err != nil {
		fmt.Printf("ERROR open: %v\n", err)
		return 2
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: os.Getenv(childLaneEnv), Max: 1, Lease: 2 * time.Second, Wait: time.Second})
		if err != nil {
			fmt.Printf("ERROR receive: %v\n", err)
			return 2
		}
		if len(ds) == 1 {
			fmt.Printf("LEASED %s %d %d\n", ds[0].ID, ds[0].Attempt, ds[0].LeaseDeadline.UnixNano())
			os.Stdout.Sync()
			time.Sleep(time.Hour) // killed long before this ends
			return 3
		}
	}
	fmt.Println("ERROR nothing to lease within 30s")
	return 2
}

// TestCrash: a consumer process killed with SIGKILL while it holds a lease
// loses nothing: the message comes back with a higher attempt number after
// the lease, and the other messages are delivered exactly once (points 1,
// 3, 10).
func TestCrash(t *testing.T, h *Harness) {
	h.require(t, CanOutliveProcess)
	b := Open(t, h, nil)
	rs := publish(t, b, newMsg("interactive", "agent.step", "victim"))
	victim := rs[0].ID

	noSpawnFromChild(t)
	// The child is this test binary, told by the environment to run the
	// child's part; -test.run keeps it from running anything else first.
	top := strings.SplitN(t.Name(), "/", 2)[0]
	cmd := exec.Command(os.Args[0], "-test.run=^"+top+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=crash", childURLEnv+"="+h.URL, childLaneEnv+"=interactive")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "LEASED ") || strings.HasPrefix(l, "ERROR ") {
				lines <- l
				return
			}
		}
		close(lines)
	}()
	var line string
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("child exited without leasing")
		}
		line = l
	case <-time.After(60 * time.Second):
		t.Fatal("child did not lease the message within 60s")
	}
	if strings.HasPrefix(line, "ERROR") {
		t.Fatalf("child: %s", line)
	}
	var id string
	var attempt int
	var deadlineNano int64
	if _, err := fmt.Sscanf(line, "LEASED %s %d %d", &id, &attempt, &deadlineNano); err != nil {
		t.Fatalf("child said %q: %v", line, err)
	}
	if id != victim || attempt != 1 {
		t.Fatalf("child leased %s attempt %d, want %s attempt 1", id, attempt, victim)
	}
	// Publish more work while the child holds its lease, then kill it.
	others := publish(t, b, newMsg("interactive", "agent.step", "a"), newMsg("interactive", "agent.step", "b"))
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill: %v", err)
	}
	killed = true
	werr := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", werr)
	}

	leaseEnd := time.Unix(0, deadlineNano)
	seen := map[string]int{}
	attempts := map[string]int{}
	deadline := time.Now().Add(time.Until(leaseEnd) + 20*time.Second)
	for time.Now().Before(deadline) && len(seen) < 3 {
		ds, err := b.Receive(ctxFor(t, 30*time.Second), broker.ReceiveRequest{Lane: "interactive", Max: 3, Lease: 30 * time.Second, Wait: time.Second})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, d := range ds {
			seen[d.ID]++
			attempts[d.ID] = d.Attempt
			ack(t, b, d)
		}
	}
	if seen[victim] != 1 {
		t.Fatalf("the killed consumer's message was delivered %d times after the crash, want 1", seen[victim])
	}
	if attempts[victim] < 2 {
		t.Errorf("redelivered with attempt %d, want ≥ 2", attempts[victim])
	}
	for _, o := range others {
		if seen[o.ID] != 1 || attempts[o.ID] != 1 {
			t.Errorf("message %s delivered %d times with attempt %d, want once with attempt 1", o.ID, seen[o.ID], attempts[o.ID])
		}
	}
	expectNone(t, b, "interactive", time.Second, "a message came back after being acked")
}
