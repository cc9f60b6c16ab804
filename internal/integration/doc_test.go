// Package integration_test holds the root package's tests that run across
// brokers and ledgers (NATS, RabbitMQ, Redis, SQS, PostgreSQL). They live
// here rather than beside switchyard.go because `go mod tidy` in a user's
// module follows the tests of every package the user imports: in the root
// directory they put every adapter's SDK, pgx and the Pub/Sub fake into
// the go.sum of anyone importing the root package (issue 21, .ci/gosum-check).
package integration_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/ledger"
)

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cancelledOnce checks that task id is cancelled with exactly one
// "cancelled" event.
func cancelledOnce(t *testing.T, L ledger.Ledger, id string) {
	t.Helper()
	ctx := context.Background()
	task, err := L.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if task.State != ledger.Cancelled {
		t.Fatalf("task %s is %s, want cancelled", id, task.State)
	}
	evs, err := L.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.To == ledger.Cancelled {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("task %s has %d moves to cancelled, want 1: %+v", id, n, evs)
	}
}

// noopArgs is the benchmarks' task, as in the root package's bench_test.go.
type noopArgs struct {
	Payload string `json:"p"`
}

func (noopArgs) Kind() string { return "bench.noop" }

// TestMain gives the AWS SDK dummy credentials when none are set (the SQS
// emulator checks none), as the adapters' own tests do.
func TestMain(m *testing.M) {
	testenv.EmulatorAWSCredentials()
	os.Exit(m.Run())
}
