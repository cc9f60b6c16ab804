package runtimebench

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/testclean"
)

// TestRawClient_ExactlyOnce runs both raw-client rows at a tiny size on
// every reachable broker (skipping, or failing under
// SWITCHYARD_REQUIRE_BROKERS=1, where one is down): every message of a
// run is consumed, none twice, and no body of another run turns up. The
// row's own namespace is fresh and removed after, as in the bench.
func TestRawClient_ExactlyOnce(t *testing.T) {
	for _, kind := range []string{"rabbitmq", "nats", "asynq", "sqs"} {
		t.Run(kind, func(t *testing.T) {
			u := testclean.URL(t, kind, NewNamespace("syrawt"), nil) // Run replaces the namespace with its own
			for _, mode := range []Mode{RawClient, RawClientBatched} {
				r, err := Run(context.Background(), Config{BrokerURL: u, Tasks: 250, Publishers: 3, Timeout: 2 * time.Minute}, mode)
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				if r.Skipped != "" {
					if kind == "asynq" && mode == RawClientBatched {
						continue
					}
					t.Fatalf("%s skipped: %s", mode, r.Skipped)
				}
				if r.Tasks != 250 || r.Duplicates != 0 || r.Elapsed <= 0 {
					t.Errorf("%s: %d tasks, %d duplicates, %s", mode, r.Tasks, r.Duplicates, r.Elapsed)
				}
			}
		})
	}
	r, err := Run(context.Background(), Config{Tasks: 10}, RawClient)
	if err != nil || r.Skipped == "" {
		t.Errorf("embedded: %+v, %v; want skipped", r, err)
	}
}

// TestLedgerOffBatched_EveryBroker runs the ledger-off-batched row
// (Publishers goroutines × EnqueueMany chunks of 100, 10 on SQS) at a
// tiny size on the embedded broker and every reachable one (skipping, or
// failing under SWITCHYARD_REQUIRE_BROKERS=1, where one is down): every
// task is handled, none twice. 250 tasks leave a partial last chunk.
func TestLedgerOffBatched_EveryBroker(t *testing.T) {
	for _, kind := range []string{"embedded", "rabbitmq", "nats", "asynq", "sqs"} {
		t.Run(kind, func(t *testing.T) {
			u := testclean.URL(t, kind, NewNamespace("sybatt"), nil) // Run replaces the namespace with its own
			r, err := Run(context.Background(), Config{BrokerURL: u, Tasks: 250, Publishers: 3, Slots: 8, Timeout: 2 * time.Minute}, LedgerOffBatched)
			if err != nil {
				t.Fatal(err)
			}
			if r.Skipped != "" || r.Tasks != 250 || r.Duplicates != 0 || r.Elapsed <= 0 || r.P50 <= 0 {
				t.Errorf("%+v; want 250 tasks each handled once", r)
			}
		})
	}
}
