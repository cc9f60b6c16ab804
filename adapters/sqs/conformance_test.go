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
			p := newFaultProxy(t, target)
			endpoint = "http://" + p.addr
			h.Disrupt = func(ctx context.Context) (func(context.Context) error, error) {
				p.down()
				return p.up, nil
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
