package integration_test

import (
	"testing"

	_ "github.com/switchyard-dev/switchyard/adapters/nats"
	_ "github.com/switchyard-dev/switchyard/adapters/sqs"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/internal/testclean"
)

// encryptedCases are the conformance cases in which a driver re-publishes
// or moves a message (nack, release, dead-letter, a held nack that Broker
// re-publishes): with a codec each must hand the driver the sealed body
// and still keep its guarantee. (All of them, with MaxAttempts, Ordering
// and Dedup, passed on every broker when this was written; the list is
// short to keep the root package's tests quick.)
var encryptedCases = []string{"NackDelay", "Release", "DeadLetter", "LongNackHeld"}

// TestEncryption_Conformance runs those cases with payload encryption on
// every network broker (the embedded one runs the whole suite so in
// adapters/embedded). Brokers that are unreachable skip, or fail under
// SWITCHYARD_REQUIRE_BROKERS=1.
func TestEncryption_Conformance(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs conformance cases on four brokers")
	}
	t.Parallel()
	c := secretCodec(t, "k1:"+secretKey(1))
	for _, kind := range []string{"rabbitmq", "nats", "asynq", "sqs"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for _, name := range encryptedCases {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					conformance.RunCase(t, name, func(t *testing.T) *conformance.Harness {
						url := testclean.URL(t, kind, conformance.Namespace(t), nil)
						return &conformance.Harness{URL: url, Options: &broker.Options{Codec: c}}
					})
				})
			}
		})
	}
}
