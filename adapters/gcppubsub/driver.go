package gcppubsub

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchyard-dev/switchyard/broker"
)

func init() {
	broker.Register("gcppubsub", func(ctx context.Context, u *url.URL) (broker.Driver, error) {
		return Open(ctx, u)
	})
}

// envOverhead bounds what broker.EncodeEnvelope adds to Message.Size: the
// magic and version, six length prefixes, two timestamps, the attempt
// limit, the header count and two length prefixes per header.
const envOverhead = 3 + 6*2 + 2*10 + 5 + 2 + broker.MaxHeaders*4

// recordReserve is the room a message keeps for the dead-letter record
// that travels with it on the dead-letter topic (a longer record is
// trimmed, see attachRecord).
const recordReserve = 8 << 10

// Driver is the Google Cloud Pub/Sub implementation of broker.Driver. Open
// it with broker.Open("gcppubsub://…") or with Open.
type Driver struct {
	cfg    *Config
	conn   *grpc.ClientConn // the emulator's connection; nil on the real service
	topics *vkit.TopicAdminClient
	subs   *vkit.SubscriptionAdminClient
	caps   broker.Capabilities
	closed atomic.Bool

	mu    sync.Mutex
	lanes map[string]*laneRes

	bg     context.Context // cancelled by Close; delay movers
	stopBg context.CancelFunc
	wg     sync.WaitGroup
}

var _ broker.Driver = (*Driver)(nil)

// laneRes are the resolved topics and subscriptions of one lane.
type laneRes struct {
	mu     sync.Mutex
	ready  bool
	moving bool
	names  names
}

// Open opens a driver from a gcppubsub:// URL (see the package
// documentation). Credentials come from Application Default Credentials,
// except with ?emulator=, which needs none.
func Open(ctx context.Context, u *url.URL) (*Driver, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg)
}

// OpenConfig opens a driver from a configuration (see Config for the
// defaults ParseURL fills in; OpenConfig fills in none).
func OpenConfig(ctx context.Context, cfg *Config) (*Driver, error) {
	if cfg == nil {
		return nil, broker.Invalidf("gcppubsub: nil config")
	}
	if p := cfg.problems(); len(p) > 0 {
		return nil, broker.Invalidf("gcppubsub: %s", strings.Join(p, "; "))
	}
	c := *cfg
	cfg = &c
	// Pull responses may hold many large messages; the gRPC default of
	// 4 MiB per received message is far too small.
	callOpts := grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32))
	var opts []option.ClientOption
	d := &Driver{cfg: cfg, lanes: map[string]*laneRes{}}
	if cfg.Emulator != "" {
		conn, err := grpc.NewClient(cfg.Emulator, grpc.WithTransportCredentials(insecure.NewCredentials()), callOpts)
		if err != nil {
			return nil, broker.Invalidf("gcppubsub: emulator %s: %v", cfg.Emulator, err)
		}
		d.conn = conn
		opts = append(opts, option.WithGRPCConn(conn), option.WithTelemetryDisabled())
	} else {
		opts = append(opts, option.WithGRPCDialOption(callOpts))
		if cfg.Endpoint != "" {
			opts = append(opts, option.WithEndpoint(cfg.Endpoint))
		}
	}
	var err error
	if d.topics, err = vkit.NewTopicAdminClient(ctx, opts...); err != nil {
		d.closeConns()
		return nil, classify("open", err)
	}
	if d.subs, err = vkit.NewSubscriptionAdminClient(ctx, opts...); err != nil {
		d.closeConns()
		return nil, classify("open", err)
	}
	// The adapter never retries by itself (the scheduler does, with its
	// policy): drop the library's per-call retry and timeout settings.
	*d.topics.CallOptions = vkit.TopicAdminCallOptions{}
	*d.subs.CallOptions = vkit.SubscriptionAdminCallOptions{}
	d.bg, d.stopBg = context.WithCancel(context.Background())
	d.caps = broker.Capabilities{
		MaxDelay:          maxDelay,
		MaxLease:          maxAckDeadline,
		LeaseExtension:    true,
		Ordering:          cfg.Ordering,
		DeadLetterReasons: true,
		MaxMessageSize:    maxMessageSize(cfg.MaxMessageSize),
		MaxBatch:          maxPullBatch,
	}
	return d, nil
}

// maxDelay is the longest delay the driver keeps itself (in the lane's
// delay subscription); Broker re-publishes longer ones in hops of it. It
// stays well inside the retention of unacknowledged messages (7 days on
// Pub/Sub, 10 minutes on pstest).
const maxDelay = 5 * time.Minute

// maxMessageSize is the largest Message.Size whose envelope, with room for
// a dead-letter record, fits a message of limit bytes.
func maxMessageSize(limit int) int {
	return limit - envOverhead - recordReserve
}

func (d *Driver) closeConns() {
	if d.topics != nil {
		_ = d.topics.Close()
	}
	if d.subs != nil {
		_ = d.subs.Close()
	}
	if d.conn != nil {
		_ = d.conn.Close()
	}
}

// Capabilities reports what Pub/Sub does natively.
func (d *Driver) Capabilities() broker.Capabilities { return d.caps }

// Config returns a copy of the driver's configuration.
func (d *Driver) Config() Config { return *d.cfg }

// Clients returns the library's topic and subscription clients, for tests
// and tools.
func (d *Driver) Clients() (*vkit.TopicAdminClient, *vkit.SubscriptionAdminClient) {
	return d.topics, d.subs
}

// Close stops the delay movers and closes the clients. Delivered, unacked
// messages come back after their ack deadlines.
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.stopBg()
	d.wg.Wait()
	d.closeConns()
	return nil
}

// Names returns the full resource names of lane's topics and
// subscriptions (they share their IDs).
func (d *Driver) Names(lane string) (live, dead, delay string, err error) {
	if err := broker.ValidateName("lane", lane); err != nil {
		return "", "", "", err
	}
	n := newNames(d.cfg, lane)
	return n.liveTopic, n.deadTopic, n.delayTopic, nil
}

// names are the resource names of one lane. A lane's topic and
// subscription share their ID ("<namespace>+<lane>", ":" written "~"),
// which Pub/Sub allows since they are different resource types.
type names struct {
	liveTopic, deadTopic, delayTopic string
	liveSub, deadSub, delaySub       string
}

func newNames(cfg *Config, lane string) names {
	id := cfg.Namespace + "+" + strings.ReplaceAll(lane, ":", "~")
	t := "projects/" + cfg.Project + "/topics/"
	s := "projects/" + cfg.Project + "/subscriptions/"
	return names{
		liveTopic: t + id, deadTopic: t + id + "+dlq", delayTopic: t + id + "+delay",
		liveSub: s + id, deadSub: s + id + "+dlq", delaySub: s + id + "+delay",
	}
}

// lane resolves (and, when allowed, creates) the topics and subscriptions
// of lane.
func (d *Driver) lane(ctx context.Context, op, lane string) (*laneRes, error) {
	if d.closed.Load() {
		return nil, broker.ClosedError(op)
	}
	if err := broker.ValidateName("lane", lane); err != nil {
		return nil, err
	}
	d.mu.Lock()
	lr := d.lanes[lane]
	if lr == nil {
		lr = &laneRes{names: newNames(d.cfg, lane)}
		d.lanes[lane] = lr
	}
	d.mu.Unlock()
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.ready {
		return lr, nil
	}
	if err := d.ensure(ctx, lr.names); err != nil {
		return nil, classify(op, err)
	}
	lr.ready = true
	return lr, nil
}

// forget drops a lane's cached resolution after Pub/Sub said a resource
// does not exist, so that the next call resolves (and recreates) it.
func (d *Driver) forget(lane string, err error) {
	if status.Code(errors.Unwrap(err)) != codes.NotFound && status.Code(err) != codes.NotFound {
		return
	}
	d.mu.Lock()
	delete(d.lanes, lane)
	d.mu.Unlock()
}

// ensure creates the lane's three topics and three subscriptions, or with
// create=false checks that they exist and that the live subscription has
// the dead-letter policy the attempt count depends on.
func (d *Driver) ensure(ctx context.Context, n names) error {
	if !d.cfg.Create {
		for _, t := range []string{n.liveTopic, n.deadTopic, n.delayTopic} {
			if _, err := d.topics.GetTopic(ctx, &pb.GetTopicRequest{Topic: t}); err != nil {
				return err
			}
		}
		for _, s := range []string{n.deadSub, n.delaySub} {
			if _, err := d.subs.GetSubscription(ctx, &pb.GetSubscriptionRequest{Subscription: s}); err != nil {
				return err
			}
		}
		live, err := d.subs.GetSubscription(ctx, &pb.GetSubscriptionRequest{Subscription: n.liveSub})
		if err != nil {
			return err
		}
		if live.GetDeadLetterPolicy() == nil {
			return broker.Invalidf("gcppubsub: subscription %s has no dead-letter policy: Pub/Sub counts delivery attempts only with one (create it with a dead-letter topic, or open with create=true)", n.liveSub)
		}
		return nil
	}
	for _, t := range []string{n.deadTopic, n.delayTopic, n.liveTopic} {
		if _, err := d.topics.CreateTopic(ctx, &pb.Topic{Name: t}); err != nil && status.Code(err) != codes.AlreadyExists {
			return err
		}
	}
	retain := durationpb.New(7 * 24 * time.Hour)
	subs := []*pb.Subscription{
		{Name: n.deadSub, Topic: n.deadTopic, AckDeadlineSeconds: subAckDeadline, MessageRetentionDuration: retain},
		{Name: n.delaySub, Topic: n.delayTopic, AckDeadlineSeconds: subAckDeadline, MessageRetentionDuration: retain},
		{
			Name: n.liveSub, Topic: n.liveTopic, AckDeadlineSeconds: subAckDeadline, MessageRetentionDuration: retain,
			EnableMessageOrdering:     d.cfg.Ordering,
			EnableExactlyOnceDelivery: d.cfg.ExactlyOnce,
			DeadLetterPolicy:          &pb.DeadLetterPolicy{DeadLetterTopic: n.deadTopic, MaxDeliveryAttempts: int32(d.cfg.MaxDeliveries)},
		},
	}
	for _, s := range subs {
		if _, err := d.subs.CreateSubscription(ctx, s); err != nil && status.Code(err) != codes.AlreadyExists {
			return err
		}
	}
	return nil
}

// DeleteLane deletes lane's subscriptions and topics (tests and tools;
// whatever they held is gone).
func (d *Driver) DeleteLane(ctx context.Context, lane string) error {
	if err := broker.ValidateName("lane", lane); err != nil {
		return err
	}
	n := newNames(d.cfg, lane)
	var first error
	for _, s := range []string{n.liveSub, n.deadSub, n.delaySub} {
		if err := d.subs.DeleteSubscription(ctx, &pb.DeleteSubscriptionRequest{Subscription: s}); err != nil && status.Code(err) != codes.NotFound && first == nil {
			first = err
		}
	}
	for _, t := range []string{n.liveTopic, n.deadTopic, n.delayTopic} {
		if err := d.topics.DeleteTopic(ctx, &pb.DeleteTopicRequest{Topic: t}); err != nil && status.Code(err) != codes.NotFound && first == nil {
			first = err
		}
	}
	d.mu.Lock()
	delete(d.lanes, lane)
	d.mu.Unlock()
	return classify("delete lane", first)
}

// Stats checks that the lane's subscriptions answer and reports zero
// counts: the Pub/Sub API has no queue depths (see "Stats" in doc.go).
func (d *Driver) Stats(ctx context.Context, lane string) (broker.Stats, error) {
	lr, err := d.lane(ctx, "stats", lane)
	if err != nil {
		return broker.Stats{}, err
	}
	if _, err := d.subs.GetSubscription(ctx, &pb.GetSubscriptionRequest{Subscription: lr.names.liveSub}); err != nil {
		d.forget(lane, err)
		return broker.Stats{}, classify("stats", err)
	}
	return broker.Stats{Lane: lane}, nil
}

// handle is a delivery's reference: the subscription and ack ID.
type handle struct {
	lane  string
	sub   string
	ackID string
	dead  bool
	raw   []byte // the message data as received (dead letters: the original data)
}

func handleOf(op string, dv *broker.Delivery) (*handle, error) {
	if dv == nil {
		return nil, broker.Invalidf("%s: nil delivery", op)
	}
	h, ok := dv.Handle.(*handle)
	if !ok || h == nil {
		return nil, broker.Invalidf("%s: delivery %s was not received from this driver", op, dv.ID)
	}
	return h, nil
}

func handles(op string, ds []*broker.Delivery) ([]*handle, error) {
	hs := make([]*handle, len(ds))
	for i, dv := range ds {
		h, err := handleOf(op, dv)
		if err != nil {
			return nil, err
		}
		hs[i] = h
	}
	return hs, nil
}

// seconds rounds d up to whole seconds within [lo, hi].
func seconds(d time.Duration, lo, hi int32) int32 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < int64(lo) {
		return lo
	}
	if s > int64(hi) {
		return hi
	}
	return int32(s)
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func (h *handle) String() string { return fmt.Sprintf("%s/%s", h.sub, h.ackID) }
