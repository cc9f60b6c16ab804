package gcppubsub_test

import (
	"context"
	"net/url"
	"testing"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/switchyard-dev/switchyard/adapters/gcppubsub"
	"github.com/switchyard-dev/switchyard/internal/testclean/pubsubclean"
)

// emulator is the address of the Pub/Sub fake the tests use: pstest,
// served by this test process on a loopback TCP port (so that the child
// processes of the crash, chaos and fleet cases reach it too), unless
// SWITCHYARD_PUBSUB_EMULATOR names another emulator.
func emulator(testing.TB) string { return pubsubclean.PubSubEmulator() }

// testURL is a gcppubsub:// URL on the emulator at addr with namespace ns
// and extra parameters ("&k=v").
func testURL(addr, ns, extra string) string {
	return pubsubclean.PubSubURL(addr, ns, nil) + extra
}

func openDriver(ctx context.Context, rawURL string) (*gcppubsub.Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	return gcppubsub.Open(ctx, u)
}

// deleteNamespace deletes the subscriptions and topics of a test
// namespace, best effort.
func deleteNamespace(addr, ns string) { pubsubclean.DeletePubSubNamespace(addr, ns) }

// injectRaw returns a Harness.InjectRaw that publishes body to the lane's
// live topic as a foreign publisher would.
func injectRaw(rawURL string) func(ctx context.Context, lane string, body []byte) error {
	return func(ctx context.Context, lane string, body []byte) error {
		d, err := openDriver(ctx, rawURL)
		if err != nil {
			return err
		}
		defer d.Close()
		if _, err := d.Stats(ctx, lane); err != nil { // creates the lane
			return err
		}
		live, _, _, err := d.Names(lane)
		if err != nil {
			return err
		}
		topics, _ := d.Clients()
		_, err = topics.Publish(ctx, &pb.PublishRequest{Topic: live, Messages: []*pb.PubsubMessage{{Data: body}}})
		return err
	}
}
