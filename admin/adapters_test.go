//go:build !switchyard_fuzzbuild

package admin

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	_ "github.com/switchyard-dev/switchyard/adapters/all"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/internal/testclean"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestMain gives the AWS SDK dummy credentials when none are set (the SQS
// emulator checks none).
func TestMain(m *testing.M) {
	testenv.EmulatorAWSCredentials()
	os.Exit(m.Run())
}

// TestOps_DeadLettersEveryAdapter runs the dead-letter operations (list,
// look up, replay, move, purge) on every real adapter, each in a namespace
// of its own that the test removes afterwards.
func TestOps_DeadLettersEveryAdapter(t *testing.T) {
	for _, kind := range []string{"embedded", "rabbitmq", "nats", "asynq", "redisstreams", "sqs", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ns := adapterNamespace()
			e := newEnvURL(t, adapterURL(t, kind, ns), true, []string{"batch", "other"})
			var want []string
			for i, tenant := range []string{"acme", "acme", "globex", "acme"} {
				r, err := e.ops.Enqueue(e.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", Lane: "batch", Tenant: tenant,
					Args: json.RawMessage(`{"i":` + string(rune('0'+i)) + `}`), IdempotencyKey: "key-" + string(rune('a'+i))})
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, r.ID)
			}
			if got := e.killN("batch", broker.ReasonPermanent, 4); len(got) != 4 {
				t.Fatalf("dead-lettered %d of 4", len(got))
			}
			list := func(sc Scope, f DeadFilter) []string {
				t.Helper()
				items, err := e.ops.DeadLetters(e.ctx, sc, f)
				if err != nil {
					t.Fatal(err)
				}
				return ids(items)
			}
			for round := 0; round < 3; round++ {
				if got := list(Scope{}, DeadFilter{Lane: "batch"}); !slices.Equal(got, sorted(want)) {
					t.Fatalf("round %d: listed %v, want %v", round, got, sorted(want))
				}
			}
			if got := list(Scope{}, DeadFilter{}); !slices.Equal(got, sorted(want)) {
				t.Fatalf("every lane: listed %v, want %v", got, sorted(want))
			}
			if got := list(Scope{Tenant: "globex"}, DeadFilter{}); !slices.Equal(got, []string{want[2]}) {
				t.Errorf("scoped: %v", got)
			}
			it, err := e.ops.DeadLetter(e.ctx, Scope{}, "batch", want[1])
			if err != nil || it.Reason != broker.ReasonPermanent || it.Tenant != "acme" || it.Kind != "pdf.parse" {
				t.Errorf("dead letter: %+v %v", it, err)
			}
			if _, err := e.ops.DeadLetter(e.ctx, Scope{Tenant: "acme"}, "batch", want[2]); err == nil {
				t.Error("another tenant's dead letter found")
			}

			rep, err := e.ops.Replay(e.ctx, Scope{}, DeadFilter{Lane: "batch", IDs: []string{want[0]}}, "operator:t", nil)
			if err != nil || rep.Done != 1 || len(rep.Failed) != 0 {
				t.Fatalf("replay: %+v %v", rep, err)
			}
			rep, err = e.ops.Move(e.ctx, Scope{Tenant: "acme"}, DeadFilter{Lane: "batch", IDs: []string{want[1]}}, "other", "operator:t", nil)
			if err != nil || rep.Done != 1 || len(rep.Failed) != 0 {
				t.Fatalf("move: %+v %v", rep, err)
			}
			rep, err = e.ops.Purge(e.ctx, Scope{}, DeadFilter{Lane: "batch", Tenant: "globex"}, "operator:t", nil)
			if err != nil || rep.Done != 1 {
				t.Fatalf("purge: %+v %v", rep, err)
			}
			if got := list(Scope{}, DeadFilter{Lane: "batch"}); !slices.Equal(got, []string{want[3]}) {
				t.Errorf("left: %v, want %v", got, want[3:])
			}
			for id, st := range map[string]ledger.State{want[0]: ledger.Queued, want[1]: ledger.Queued, want[2]: ledger.Dead, want[3]: ledger.Dead} {
				if got := e.state(id); got != st {
					t.Errorf("%s: %s, want %s", id, got, st)
				}
			}
			// Peeking at the live lane takes nothing and spends no attempt.
			ms, err := e.ops.Peek(e.ctx, Scope{}, "batch", 5)
			if err != nil || len(ms) != 1 || ms[0].ID != want[0] {
				t.Errorf("peek: %d %v", len(ms), err)
			}
			if d := e.receiveOne("batch"); d.ID != want[0] || d.Attempt != 1 {
				t.Errorf("replayed: %s attempt %d", d.ID, d.Attempt)
			}
			if d := e.receiveOne("other"); d.ID != want[1] || d.Tenant != "acme" || d.IdempotencyKey != "key-b" || string(d.Body) != `{"i":1}` {
				t.Errorf("moved: %+v", d.Message)
			}
		})
	}
}

// killN dead-letters n messages of lane, waiting up to 30s for them.
func (e *env) killN(lane string, reason broker.Reason, n int) []string {
	e.t.Helper()
	var out []string
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		ds, err := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: lane, Max: n - len(out), Lease: time.Minute, Wait: time.Second})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, d := range ds {
			e.transition(d.ID, ledger.Running, "attempt_started")
			e.transition(d.ID, ledger.Dead, string(reason))
			if err := e.b.DeadLetter(e.ctx, d, &broker.DeadLetter{Reason: reason, Error: "boom"}); err != nil {
				e.t.Fatal(err)
			}
			out = append(out, d.ID)
		}
	}
	return out
}

// receiveOne receives one message of lane, waiting up to 30s, and acks it.
func (e *env) receiveOne(lane string) *broker.Delivery {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: lane, Max: 1, Lease: time.Minute, Wait: time.Second})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(ds) == 1 {
			_ = e.b.Ack(e.ctx, ds[0])
			return ds[0]
		}
	}
	e.t.Fatalf("nothing arrived on %s", lane)
	return nil
}

func adapterNamespace() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "adm" + hex.EncodeToString(b[:])
}

// adapterURL returns a URL of the named adapter for namespace ns, and
// registers the removal of what the test creates there; it skips when the
// broker is unavailable.
func adapterURL(t *testing.T, kind, ns string) string {
	t.Helper()
	return testclean.URL(t, kind, ns, nil)
}
