package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
)

func TestOpen_BadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	notDB := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notDB, []byte(strings.Repeat("this is not a database\n", 200)), 0o644); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(dir, "corrupt.db")
	// A valid SQLite header followed by garbage pages.
	hdr := append([]byte("SQLite format 3\x00"), make([]byte, 84)...)
	hdr[16], hdr[17] = 0x10, 0x00 // page size 4096
	if err := os.WriteFile(corrupt, append(hdr, []byte(strings.Repeat("\xde\xad\xbe\xef", 4096))...), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, url, want string
	}{
		{"not a database", "embedded://" + notDB, "not a Switchyard SQLite database"},
		{"corrupt database", "embedded://" + corrupt, "not a Switchyard SQLite database"},
		{"directory", "embedded://" + dir, "is a directory"},
		{"no path", "embedded://", "needs a file path"},
		{"unknown parameter", "embedded://" + filepath.Join(dir, "ok.db") + "?nope=1", "unknown parameter"},
		{"bad duration", "embedded://" + filepath.Join(dir, "ok.db") + "?poll=fast", "poll"},
		{"bad namespace", "mem://x?namespace=bad%20ns", "namespace"},
		{"mem path", "mem://x/y", "takes a name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := broker.Open(ctx, c.url, nil)
			if err == nil {
				b.Close()
				t.Fatalf("open %s succeeded", c.url)
			}
			if !errors.Is(err, broker.ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

// TestMultiProcess: several processes may use one database file at once;
// SQLite's locking keeps them safe. A child process publishes and consumes
// while this one does too; every message is delivered exactly once.
func TestMultiProcess(t *testing.T) {
	if os.Getenv("EMBEDDED_CHILD_URL") != "" {
		childWork(os.Getenv("EMBEDDED_CHILD_URL"))
		return
	}
	t.Parallel()
	url := "embedded://" + filepath.Join(t.TempDir(), "shared.db")
	ctx := context.Background()
	b, err := broker.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMultiProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EMBEDDED_CHILD_URL="+url)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	const n = 500
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = &broker.Message{Lane: "batch", Kind: "parent", Body: []byte(fmt.Sprint(i))}
	}
	for i := 0; i < n; i += 50 {
		if _, err := b.Publish(ctx, msgs[i:i+50]...); err != nil {
			t.Fatal(err)
		}
	}
	childDone := make(chan error, 1)
	go func() { childDone <- cmd.Wait() }()
	seen := map[string]int{}
	var childErr error
	exited := false
	deadline := time.Now().Add(90 * time.Second)
	for idle := 0; idle < 5 && time.Now().Before(deadline); {
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 20, Lease: time.Minute, Wait: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			seen[d.ID]++
		}
		if len(ds) > 0 {
			if err := b.Ack(ctx, ds...); err != nil {
				t.Fatal(err)
			}
		}
		if !exited {
			select {
			case childErr = <-childDone:
				exited = true
			default:
			}
		}
		if exited && len(ds) == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	if !exited {
		childErr = <-childDone
	}
	if childErr != nil {
		t.Fatalf("child: %v\n%s", childErr, out.String())
	}
	// The child reports how many it consumed; together with ours, every
	// message exactly once.
	var childGot int
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "CHILD_CONSUMED ") {
			fmt.Sscanf(line, "CHILD_CONSUMED %d", &childGot)
		}
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("message %s delivered %d times to the parent", id, c)
		}
	}
	if total := len(seen) + childGot; total != 2*n {
		t.Fatalf("parent consumed %d, child %d: total %d, want %d\n%s", len(seen), childGot, total, 2*n, out.String())
	}
}

func childWork(url string) {
	ctx := context.Background()
	b, err := broker.Open(ctx, url, nil)
	if err != nil {
		fmt.Println("CHILD_ERROR", err)
		os.Exit(2)
	}
	defer b.Close()
	const n = 500
	for i := 0; i < n; i += 50 {
		msgs := make([]*broker.Message, 50)
		for j := range msgs {
			msgs[j] = &broker.Message{Lane: "batch", Kind: "child", Body: []byte(fmt.Sprint(i + j))}
		}
		if _, err := b.Publish(ctx, msgs...); err != nil {
			fmt.Println("CHILD_ERROR", err)
			os.Exit(2)
		}
	}
	got := 0
	for idle := 0; idle < 5; {
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 20, Lease: time.Minute, Wait: 200 * time.Millisecond})
		if err != nil {
			fmt.Println("CHILD_ERROR", err)
			os.Exit(2)
		}
		if len(ds) == 0 {
			idle++
			continue
		}
		idle = 0
		if err := b.Ack(ctx, ds...); err != nil {
			fmt.Println("CHILD_ERROR", err)
			os.Exit(2)
		}
		got += len(ds)
	}
	fmt.Printf("CHILD_CONSUMED %d\n", got)
	os.Exit(0)
}

func TestStats_OldestReady(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	s, err := b.Stats(ctx, "batch")
	if err != nil {
		t.Fatal(err)
	}
	if s.Ready != 1 || s.OldestReady < 50*time.Millisecond || s.OldestReady > 10*time.Second {
		t.Fatalf("stats %+v: want 1 ready, oldest ≥ 50ms", s)
	}
	lanes, ok, err := b.Lanes(ctx)
	if err != nil || !ok || len(lanes) != 1 || lanes[0] != "batch" {
		t.Fatalf("Lanes() = %v, %v, %v; want [batch]", lanes, ok, err)
	}
}

func TestDriver_ForeignHandle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := embedded.OpenURL(ctx, "mem://"+conformance.Namespace(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	foreign := &broker.Delivery{Message: broker.Message{ID: "x"}, Handle: "not ours"}
	for name, err := range map[string]error{
		"ack":    d.Ack(ctx, []*broker.Delivery{foreign}),
		"nack":   d.Nack(ctx, foreign, 0),
		"extend": d.Extend(ctx, []*broker.Delivery{foreign}, time.Second),
		"dead":   d.DeadLetter(ctx, foreign, &broker.DeadLetter{Reason: broker.ReasonPermanent}),
		"replay": d.Replay(ctx, foreign),
	} {
		if !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s with a foreign handle: %v, want ErrInvalid", name, err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Publish(ctx, []*broker.Message{{Lane: "a", Kind: "b"}}); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("publish after close: %v, want ErrClosed", err)
	}
}
