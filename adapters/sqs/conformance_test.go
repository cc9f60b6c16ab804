package sqs_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/internal/faultproxy"
)

// maker builds a conformance harness on the emulator (or any SQS endpoint
// in SWITCHYARD_SQS_ENDPOINT), with a fresh namespace whose queues are
// deleted afterwards. The outage case talks to SQS through a
// fault-injecting TCP proxy whose Disrupt drops every connection and
// refuses new ones: the emulator keeps its state, as SQS would.
func maker(fifo bool) conformance.HarnessMaker {
	return func(t *testing.T) *conformance.Harness {
		endpoint := testenv.SQS.Endpoint(t)
		ns := conformance.Namespace(t)
		h := &conformance.Harness{Cleanup: func() { deleteNamespace(endpoint, ns) }}
		if strings.HasSuffix(t.Name(), "/Outage") {
			target, err := testenv.HostPort(endpoint)
			if err != nil {
				t.Fatal(err)
			}
			p := faultproxy.New(t, target)
			endpoint = "http://" + p.Addr
			h.Disrupt = func(ctx context.Context) (func(context.Context) error, error) {
				p.Down()
				return p.Up, nil
			}
		}
		h.URL = testURL(endpoint, ns, fifo, "")
		h.InjectRaw = injectRaw(h.URL)
		return h
	}
}

// deleteNamespace deletes the queues of a test namespace, best effort.
func deleteNamespace(endpoint, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := openForCleanup(ctx, testURL(endpoint, ns, false, "&create=false"))
	if err != nil {
		return
	}
	defer d.Close()
	out, err := d.Client().ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(ns + "_"), MaxResults: aws.Int32(1000)})
	if err != nil {
		return
	}
	for _, u := range out.QueueUrls {
		_, _ = d.Client().DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
	}
}

func TestConformance(t *testing.T) {
	t.Run("standard", func(t *testing.T) { conformance.Run(t, maker(false)) })
	t.Run("fifo", func(t *testing.T) { conformance.Run(t, maker(true)) })
}

func TestConformanceE2E(t *testing.T) {
	t.Run("standard", func(t *testing.T) { conformance.RunE2E(t, maker(false)) })
	t.Run("fifo", func(t *testing.T) { conformance.RunE2E(t, maker(true)) })
}

// TestChaos: 1,000 three-step tasks with one effect each, on worker
// processes SIGKILLed at random at least 50 times, on standard and FIFO
// queues.
//
//	go test ./adapters/sqs/ -run TestChaos -v
func TestChaos(t *testing.T) {
	if os.Getenv("SWITCHYARD_CONFORMANCE_CHILD") != "" {
		// A chaos worker process: conformance.TestChaos does not divert
		// its children itself, RunCase does (and exits).
		conformance.RunCase(t, "", nil)
		return
	}
	if testing.Short() {
		t.Skip("the chaos run takes minutes against the emulator; -short skips it")
	}
	t.Run("standard", func(t *testing.T) { conformance.TestChaos(t, maker(false)(t), conformance.ChaosOptions{}) })
	t.Run("fifo", func(t *testing.T) { conformance.TestChaos(t, maker(true)(t), conformance.ChaosOptions{}) })
}

// TestOrderingFleet: ordering by key across two publisher and three
// consumer processes, 50 keys x 40 tasks, one consumer SIGKILLed mid-run
// (contract point 8), with the ledger and without it.
//
//	go test ./adapters/sqs/ -run TestOrderingFleet -v
func TestOrderingFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("the fleet ordering case starts five processes; -short skips it")
	}
	for _, noLedger := range []bool{false, true} {
		name := "ledger"
		if noLedger {
			name = "no-ledger"
		}
		t.Run(name, func(t *testing.T) {
			for _, fifo := range []bool{false, true} {
				kind := "standard"
				if fifo {
					kind = "fifo"
				}
				t.Run(kind, func(t *testing.T) {
					h := maker(fifo)(t)
					if h.Cleanup != nil {
						t.Cleanup(h.Cleanup)
					}
					conformance.TestOrderingFleet(t, h, conformance.FleetOptions{NoLedger: noLedger})
				})
			}
		})
	}
}
