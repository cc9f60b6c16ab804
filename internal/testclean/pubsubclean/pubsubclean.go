// Package pubsubclean is testclean's Pub/Sub part: the pstest fake, test
// URLs and namespace deletion. It is apart so that the gcppubsub adapter's
// tests need the Pub/Sub module alone, not every other broker's SDK
// (testclean imports them all).
package pubsubclean

import (
	"context"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/switchyard-dev/switchyard/adapters/gcppubsub"
)

// PubSubProject is the project of the tests' gcppubsub:// URLs; the
// emulator accepts any.
const PubSubProject = "switchyard-test"

// PubSubEmulatorEnv names a Pub/Sub emulator (host:port) to test against
// instead of the in-process pstest.
const PubSubEmulatorEnv = "SWITCHYARD_PUBSUB_EMULATOR"

var (
	pstestOnce sync.Once
	pstestAddr string
)

// PubSubEmulator returns the address of the Pub/Sub fake the tests use:
// pstest (Google's fake from the Pub/Sub module) served by this process
// on a loopback TCP port, so that child processes reach it too, unless
// SWITCHYARD_PUBSUB_EMULATOR names another emulator. It needs no service,
// so it never skips.
func PubSubEmulator() string {
	if v := strings.TrimSpace(os.Getenv(PubSubEmulatorEnv)); v != "" {
		return v
	}
	pstestOnce.Do(func() {
		pstestAddr = pstest.NewServerWithAddress("127.0.0.1:0").Addr
	})
	return pstestAddr
}

// PubSubURL is a gcppubsub:// URL on the emulator at addr for namespace
// ns, with the extra parameters. Messages are capped at 1 MiB: pstest's
// gRPC server takes requests of at most 4 MiB.
func PubSubURL(addr, ns string, extra url.Values) string {
	q := url.Values{}
	for k, v := range extra {
		q[k] = v
	}
	q.Set("emulator", addr)
	q.Set("namespace", ns)
	if !q.Has("max_message_size") {
		q.Set("max_message_size", "1048576")
	}
	return "gcppubsub://" + PubSubProject + "?" + q.Encode()
}

// GCPPubSub deletes the topics and subscriptions of namespace ns on the
// emulator at addr at the end of the test (pstest keeps every
// subscription busy with a delivery loop, so leftovers slow later tests).
func GCPPubSub(t testing.TB, addr, ns string) {
	t.Cleanup(func() { DeletePubSubNamespace(addr, ns) })
}

// DeletePubSubNamespace deletes the topics and subscriptions of namespace
// ns on the emulator at addr, best effort.
func DeletePubSubNamespace(addr, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := url.Parse(PubSubURL(addr, ns, url.Values{"create": {"false"}}))
	if err != nil {
		return
	}
	d, err := gcppubsub.Open(ctx, u)
	if err != nil {
		return
	}
	defer d.Close()
	topics, subs := d.Clients()
	prefix := "/" + ns + "+"
	var subNames, topicNames []string
	it := subs.ListSubscriptions(ctx, &pb.ListSubscriptionsRequest{Project: "projects/" + PubSubProject})
	for {
		s, err := it.Next()
		if err != nil {
			break
		}
		if strings.Contains(s.GetName(), prefix) {
			subNames = append(subNames, s.GetName())
		}
	}
	tit := topics.ListTopics(ctx, &pb.ListTopicsRequest{Project: "projects/" + PubSubProject})
	for {
		tp, err := tit.Next()
		if err != nil {
			break
		}
		if strings.Contains(tp.GetName(), prefix) {
			topicNames = append(topicNames, tp.GetName())
		}
	}
	for _, s := range subNames {
		_ = subs.DeleteSubscription(ctx, &pb.DeleteSubscriptionRequest{Subscription: s})
	}
	for _, tp := range topicNames {
		_ = topics.DeleteTopic(ctx, &pb.DeleteTopicRequest{Topic: tp})
	}
}
