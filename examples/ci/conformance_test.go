package ci_test

import (
	"net/url"
	"strings"
	"testing"

	_ "github.com/switchyard-dev/switchyard/adapters/all" // every adapter's URL scheme
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/internal/testclean"
	"github.com/switchyard-dev/switchyard/switchyardtest"
)

// README: Running the conformance suite in your CI

// brokers are the team's brokers, from the environment variables the
// workflow sets (switchyardtest skips, or fails under
// SWITCHYARD_REQUIRE_BROKERS=1, when one is missing).
var brokers = []struct {
	name string
	url  func(t *testing.T) string // the broker's URL, without a namespace
}{
	{"rabbitmq", func(t *testing.T) string {
		return strings.Replace(switchyardtest.RabbitMQ(t), "amqp://", "rabbitmq://", 1)
	}},
	{"asynq", func(t *testing.T) string { return "redis://" + switchyardtest.Redis(t) + "/0" }},
	{"nats", func(t *testing.T) string { return switchyardtest.NATS(t) }},
	{"postgres", func(t *testing.T) string { return switchyardtest.Postgres(t) }},
}

func TestConformance(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			base := b.url(t) // skips here, once, when the broker is missing
			conformance.Run(t, func(t *testing.T) *conformance.Harness {
				ns := conformance.Namespace(t)
				u, err := url.Parse(base)
				if err != nil {
					t.Fatal(err)
				}
				q := u.Query()
				q.Set("namespace", ns)
				u.RawQuery = q.Encode()
				forget(t, b.name, ns)
				return &conformance.Harness{
					URL: u.String(),
					Cannot: map[conformance.Ability]string{
						conformance.CanInjectRaw: "this job reaches the broker through its URL only; the adapter's own tests inject foreign bytes",
						conformance.CanDisrupt:   "the job's service containers are shared by its steps; the adapter's own tests stop brokers",
					},
				}
			})
		})
	}
}

// END README

// forget deletes what a case created in namespace ns when the case ends.
// A CI job's service containers are thrown away with the job, so a user's
// copy can leave this out; here the brokers are the machine's own.
func forget(t *testing.T, kind, ns string) {
	t.Helper()
	testclean.URL(t, kind, ns, nil)
}
