package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

const (
	relayChildEnv       = "SWITCHYARD_TEST_RELAY_CHILD"
	relayChildLedgerEnv = "SWITCHYARD_TEST_RELAY_LEDGER"
	relayChildBrokerEnv = "SWITCHYARD_TEST_RELAY_BROKER"
)

// relayChild is the body of the relay process TestOutboxRelay_SIGKILL
// kills: a Client whose only work is its outbox relay, with a small batch
// and a short lease so that kills land between publish and delete. It
// exits by itself when its parent is gone or after two minutes.
func relayChild() {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	L, err := ledger.Open(ctx, os.Getenv(relayChildLedgerEnv))
	if err != nil {
		fail(err)
	}
	b, err := broker.Open(ctx, os.Getenv(relayChildBrokerEnv), &broker.Options{Dedup: L})
	if err != nil {
		fail(err)
	}
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L,
		Relay: &switchyard.RelayConfig{Batch: 8, Lease: time.Second, PollInterval: 20 * time.Millisecond}})
	if err != nil {
		fail(err)
	}
	c.StartRelay()
	fmt.Println("RELAY READY")
	parent := os.Getppid()
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end) && os.Getppid() == parent; {
		time.Sleep(100 * time.Millisecond)
	}
	os.Exit(0)
}

// startRelayChild starts a relay process and returns its kill; ready is
// closed once it printed that its relay runs.
func startRelayChild(t *testing.T, dsn, brokerURL string) (kill func(), ready <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOutboxRelay_SIGKILL$", "-test.count=1")
	cmd.Env = append(os.Environ(), relayChildEnv+"=1", relayChildLedgerEnv+"="+dsn, relayChildBrokerEnv+"="+brokerURL)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l := sc.Text()
			if strings.HasPrefix(l, "ERROR") {
				t.Errorf("relay child: %s", l)
			}
			if l == "RELAY READY" {
				close(rd)
			}
		}
	}()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
		})
	}
	t.Cleanup(kill)
	return kill, rd
}

// TestOutboxRelay_SIGKILL: while 2,000 tasks are enqueued in transactions
// (one in five rolled back), the only relays are child processes, each
// SIGKILLed after a random short life, at least 50 times. Every committed
// task runs once and its effect happens once; no rolled-back task exists
// or runs; the outbox ends empty. A relay killed between publishing and
// deleting a row leaves it to be published again: the copies are
// counted (the runtime recognises them as duplicates).
func TestOutboxRelay_SIGKILL(t *testing.T) {
	if os.Getenv(relayChildEnv) != "" {
		relayChild()
		return
	}
	if testing.Short() {
		t.Skip("a kill loop of about 20s per store; skipped with -short")
	}
	for _, store := range []string{"sqlite", "postgres-pgx"} {
		t.Run(store, func(t *testing.T) { relayKillLoop(t, store) })
	}
}

func relayKillLoop(t *testing.T, store string) {
	const (
		txs      = 400
		perTx    = 5
		minKills = 50
	)
	ctx := context.Background()
	e := newTxEnv(t, store, &switchyard.ClientConfig{Relay: &switchyard.RelayConfig{Off: true}})
	e.srv.SetRelay(&switchyard.RelayConfig{Off: true})
	var (
		mu      sync.Mutex
		effects = map[string]int{}
	)
	// The handler's side effect, counted where it happens.
	if err := switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[emailArgs]) error {
		_, err := switchyard.Effect(ctx, "send", func(ctx context.Context) (bool, error) {
			mu.Lock()
			effects[tk.ID]++
			mu.Unlock()
			return true, nil
		}, nil)
		return err
	}, nil); err != nil {
		t.Fatal(err)
	}
	e.start(t)

	var committed, rolledBack []string
	enqDone := make(chan struct{})
	go func() {
		defer close(enqDone)
		for i := range txs {
			tx, commit, rollback := e.begin(t)
			items := make([]switchyard.EnqueueItem, perTx)
			for k := range items {
				items[k] = switchyard.EnqueueItem{Args: emailArgs{To: fmt.Sprintf("u%d-%d", i, k)}}
			}
			rs, err := e.c.EnqueueManyTx(ctx, tx, items)
			if err != nil {
				t.Errorf("tx %d: %v", i, err)
				rollback()
				return
			}
			var ids []string
			for _, r := range rs {
				if r.Err != nil {
					t.Errorf("tx %d: %v", i, r.Err)
				}
				ids = append(ids, r.ID)
			}
			if i%5 == 4 {
				if err := rollback(); err != nil {
					t.Errorf("rollback %d: %v", i, err)
				}
				rolledBack = append(rolledBack, ids...)
			} else {
				if err := commit(); err != nil {
					t.Errorf("commit %d: %v", i, err)
				}
				committed = append(committed, ids...)
			}
			time.Sleep(15 * time.Millisecond) // spread the enqueues over the kill loop
		}
	}()

	brokerURL := e.brokerURL
	kills := 0
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		kill, ready := startRelayChild(t, e.dsn, brokerURL)
		select {
		case <-ready:
		case <-time.After(20 * time.Second):
			kill()
			t.Fatal("relay child not ready in 20s")
		}
		time.Sleep(time.Duration(rand.IntN(250)) * time.Millisecond)
		kill()
		kills++
		select {
		case <-enqDone:
			if kills >= minKills {
				deadline = time.Time{}
			}
		default:
		}
	}
	<-enqDone
	if kills < minKills {
		t.Fatalf("only %d kills in the time bound", kills)
	}
	// A last relay that lives publishes what is left.
	kill, _ := startRelayChild(t, e.dsn, brokerURL)
	o := ledger.OutboxOf(e.L)
	waitFor(t, 60*time.Second, func() bool {
		st, err := o.OutboxStats(ctx)
		if err != nil || st.Depth > 0 {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		return len(effects) >= len(committed)
	})
	kill()
	time.Sleep(500 * time.Millisecond) // a late copy would show
	mu.Lock()
	defer mu.Unlock()
	for _, id := range committed {
		if n := effects[id]; n != 1 {
			t.Errorf("committed task %s: effect done %d times", id, n)
		}
		if n := e.ran(id); n > 1 {
			t.Errorf("committed task %s: handler ran %d times", id, n)
		}
	}
	for _, id := range rolledBack {
		if effects[id] != 0 {
			t.Errorf("rolled-back task %s ran", id)
		}
		if _, err := e.L.Get(ctx, id); err == nil {
			t.Errorf("rolled-back task %s exists", id)
		}
	}
	st, _ := e.b.Stats(ctx, "batch")
	t.Logf("%s: %d kills; %d committed tasks ran once each, %d rolled back never ran; %d copies recognised as duplicates; broker batch lane now %+v",
		store, kills, len(committed), len(rolledBack), e.dups.Load(), st)
}

type emailArgs struct {
	To string `json:"to"`
}

func (emailArgs) Kind() string { return "test.email" }
