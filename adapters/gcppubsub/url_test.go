package gcppubsub

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-dev/switchyard/broker"
)

func TestParseURL_Defaults(t *testing.T) {
	u, _ := url.Parse("gcppubsub://my-project")
	c, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Project: "my-project", Namespace: DefaultNamespace, Create: true, MaxDeliveries: DefaultMaxDeliveries, MaxMessageSize: maxMessageData}
	if *c != want {
		t.Fatalf("config = %+v, want %+v", *c, want)
	}
}

func TestParseURL_Refusals(t *testing.T) {
	for _, s := range []string{
		"gcppubsub://",                                     // no project
		"gcppubsub://Bad_Project",                          // not a project ID
		"gcppubsub://u:p@my-project",                       // credentials
		"gcppubsub://my-project:443",                       // a port
		"gcppubsub://my-project/x",                         // a path
		"gcppubsub://my-project?namespace=Upper",           // namespace
		"gcppubsub://my-project?namespace=googx",           // reserved prefix
		"gcppubsub://my-project?max_deliveries=101",        // above Pub/Sub's range
		"gcppubsub://my-project?max_message_size=10",       // below the floor
		"gcppubsub://my-project?emulator=nohost",           // not host:port
		"gcppubsub://my-project?emulator=h:1&endpoint=h:2", // both
		"gcppubsub://my-project?bogus=1",                   // unknown parameter
		"sqs://my-project",                                 // another scheme
	} {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if _, err := ParseURL(u); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("ParseURL(%s) = %v, want ErrInvalid", s, err)
		}
	}
}

// TestOpen_Unreachable: a driver on an address where nothing listens
// fails its first call with a transient error within its deadline.
func TestOpen_Unreachable(t *testing.T) {
	u, _ := url.Parse("gcppubsub://my-project?emulator=127.0.0.1:1")
	d, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rs, err := d.Publish(ctx, []*broker.Message{{ID: "a", Lane: "batch", Kind: "k.k"}})
	if err != nil {
		t.Fatalf("publish: %v (per-message errors expected)", err)
	}
	if rs[0].Err == nil || broker.ClassOf(rs[0].Err) == broker.Permanent {
		t.Fatalf("publish to an unreachable server: %v, want a transient error", rs[0].Err)
	}
	if _, err := d.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Wait: time.Second}); err == nil || broker.ClassOf(err) == broker.Permanent {
		t.Fatalf("receive from an unreachable server: %v, want a transient error", err)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		op   string
		err  error
		want broker.Class
		kind error
	}{
		{"receive", status.Error(codes.Unavailable, "x"), broker.Transient, nil},
		{"receive", status.Error(codes.PermissionDenied, "x"), broker.Permanent, nil},
		{"receive", status.Error(codes.InvalidArgument, "x"), broker.Permanent, broker.ErrInvalid},
		{"publish", status.Error(codes.InvalidArgument, "Request payload size exceeds the limit: too large"), broker.Permanent, broker.ErrTooLarge},
		{"publish", status.Error(codes.Unavailable, "connection error: dial tcp: connection refused"), broker.Transient, nil},
		{"publish", status.Error(codes.DeadlineExceeded, "x"), broker.UnknownOutcome, nil},
		{"publish", context.DeadlineExceeded, broker.UnknownOutcome, nil},
		{"ack", status.Error(codes.Unimplemented, "x"), broker.Permanent, broker.ErrUnsupported},
		{"ack", status.Error(codes.Code(99), "x"), broker.Transient, nil},
	} {
		got := classify(c.op, c.err)
		if broker.ClassOf(got) != c.want || (c.kind != nil && !errors.Is(got, c.kind)) {
			t.Errorf("classify(%s, %v) = %v (%v), want %v %v", c.op, c.err, got, broker.ClassOf(got), c.want, c.kind)
		}
	}
}

// TestAckFailures: the exactly-once ErrorInfo that Pub/Sub attaches to a
// failed Acknowledge or ModifyAckDeadline (pstest never sends it) maps a
// permanently failed ack ID to ErrLeaseLost.
func TestAckFailures(t *testing.T) {
	st, err := status.New(codes.InvalidArgument, "some acks failed").WithDetails(&errdetails.ErrorInfo{
		Reason:   "EXACTLY_ONCE_ACKID_FAILURE",
		Metadata: map[string]string{"ack-1": "PERMANENT_FAILURE_INVALID_ACK_ID"},
	})
	if err != nil {
		t.Fatal(err)
	}
	d := &Driver{cfg: &Config{}, lanes: map[string]*laneRes{}}
	if err := d.settleErr("ack", "batch", st.Err()); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("permanent ack failure = %v, want ErrLeaseLost", err)
	}
	st2, _ := status.New(codes.Unavailable, "retry").WithDetails(&errdetails.ErrorInfo{
		Reason: "EXACTLY_ONCE_ACKID_FAILURE", Metadata: map[string]string{"ack-1": "TRANSIENT_FAILURE_UNORDERED_ACK_ID"}})
	if err := d.settleErr("ack", "batch", st2.Err()); broker.ClassOf(err) != broker.Transient || errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("transient ack failure = %v, want transient", err)
	}
}

// TestPublish_TooLarge: a message above MaxMessageSize is refused with
// ErrTooLarge before any call (the limit is named in doc.go).
func TestPublish_TooLarge(t *testing.T) {
	d := &Driver{cfg: &Config{MaxMessageSize: minMessageData}, lanes: map[string]*laneRes{}}
	d.caps.MaxMessageSize = maxMessageSize(minMessageData)
	res := make([]broker.PublishResult, 1)
	big := &broker.Message{ID: "a", Lane: "batch", Kind: "k.k", Body: []byte(strings.Repeat("x", minMessageData))}
	d.publishTopic(context.Background(), "batch", "projects/p/topics/t", []*broker.Message{big}, []int{0}, res)
	var tl *broker.TooLargeError
	if !errors.As(res[0].Err, &tl) || tl.Max != maxMessageSize(minMessageData) {
		t.Fatalf("publish of %d bytes = %v, want ErrTooLarge with max %d", big.Size(), res[0].Err, maxMessageSize(minMessageData))
	}
}

// TestMaxMessageSize_Documented: the limit doc.go names.
func TestMaxMessageSize_Documented(t *testing.T) {
	if got := maxMessageSize(maxMessageData); got != 9_991_510 {
		t.Fatalf("MaxMessageSize at the default max_message_size = %d, doc.go says 9,991,510", got)
	}
}
