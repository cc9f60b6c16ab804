package sqs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/switchyard-dev/switchyard/broker"
)

func apiErr(code string, status int) error {
	var e error = &smithy.GenericAPIError{Code: code, Message: "m"}
	if status != 0 {
		e = &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: e}}
	}
	return &smithy.OperationError{ServiceID: "SQS", OperationName: "X", Err: e}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	dial := &smithyhttp.RequestSendError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}}
	reset := &smithyhttp.RequestSendError{Err: &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}}
	tests := []struct {
		name  string
		op    string
		err   error
		class broker.Class
		kind  error
	}{
		{"throttled", "receive", apiErr("RequestThrottled", 400), broker.Transient, nil},
		{"throttling exception", "publish", apiErr("ThrottlingException", 400), broker.Transient, nil},
		{"kms throttled", "publish", apiErr("KmsThrottled", 400), broker.Transient, nil},
		{"over limit", "receive", apiErr("OverLimit", 403), broker.Transient, nil},
		{"5xx unknown code", "receive", apiErr("SomethingNew", 503), broker.Transient, nil},
		{"internal error", "ack", apiErr("InternalError", 500), broker.Transient, nil},
		{"unknown 4xx", "ack", apiErr("SomethingNew", 400), broker.Transient, nil},
		{"access denied", "publish", apiErr("AccessDenied", 403), broker.Permanent, nil},
		{"access denied exception", "publish", apiErr("AccessDeniedException", 400), broker.Permanent, nil},
		{"bad token", "publish", apiErr("InvalidClientTokenId", 403), broker.Permanent, nil},
		{"403 unknown code", "publish", apiErr("Whatever", 403), broker.Permanent, nil},
		{"kms access", "publish", apiErr("KmsAccessDenied", 400), broker.Permanent, nil},
		{"validation", "publish", apiErr("InvalidParameterValue", 400), broker.Permanent, broker.ErrInvalid},
		{"validation exception", "publish", apiErr("ValidationException", 400), broker.Permanent, broker.ErrInvalid},
		{"batch too long", "publish", apiErr("BatchRequestTooLong", 400), broker.Permanent, broker.ErrTooLarge},
		{"unsupported", "publish", apiErr("UnsupportedOperation", 400), broker.Permanent, broker.ErrUnsupported},
		{"no queue (legacy code)", "publish", apiErr("AWS.SimpleQueueService.NonExistentQueue", 400), broker.Permanent, nil},
		{"typed no queue", "publish", &types.QueueDoesNotExist{}, broker.Permanent, nil},
		{"stale handle", "ack", apiErr("ReceiptHandleIsInvalid", 400), broker.Permanent, broker.ErrLeaseLost},
		{"not in flight", "extend", &types.MessageNotInflight{}, broker.Permanent, broker.ErrLeaseLost},
		{"expired token", "receive", apiErr("ExpiredToken", 400), broker.Transient, nil},
		{"dial publish", "publish", dial, broker.Transient, nil},
		{"reset publish", "publish", reset, broker.UnknownOutcome, nil},
		{"reset receive", "receive", reset, broker.Transient, nil},
		{"plain", "receive", errors.New("boom"), broker.Transient, nil},
	}
	for _, tt := range tests {
		err := classify(tt.op, tt.err)
		if got := broker.ClassOf(err); got != tt.class {
			t.Errorf("%s: class %v, want %v (%v)", tt.name, got, tt.class, err)
		}
		if tt.kind != nil && !errors.Is(err, tt.kind) {
			t.Errorf("%s: %v does not match %v", tt.name, err, tt.kind)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("%s: the cause is not kept", tt.name)
		}
	}
	if classify("x", nil) != nil {
		t.Error("nil error classified")
	}
	ctxErr := classify("receive", fmt.Errorf("op: %w", context.DeadlineExceeded))
	if !errors.Is(ctxErr, context.DeadlineExceeded) || broker.ClassOf(ctxErr) != broker.Transient {
		t.Errorf("context error: %v (class %v)", ctxErr, broker.ClassOf(ctxErr))
	}
	already := broker.LeaseLostError("ack", "id")
	if classify("ack", already) != already {
		t.Error("an already classified error was rewrapped")
	}
}

func TestEntryError(t *testing.T) {
	t.Parallel()
	if err := entryError("ack", "ReceiptHandleIsInvalid", "m", true); !errors.Is(err, broker.ErrLeaseLost) {
		t.Errorf("stale handle entry: %v", err)
	}
	if err := entryError("publish", "SomeSenderFault", "m", true); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("sender fault entry: %v", err)
	}
	if err := entryError("publish", "InternalError", "m", false); broker.ClassOf(err) != broker.Transient {
		t.Errorf("server fault entry: %v", err)
	}
}

func TestSeconds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d      string
		lo, hi int32
		want   int32
	}{{"0s", 0, 900, 0}, {"1ns", 0, 900, 1}, {"1s", 0, 900, 1}, {"1.5s", 0, 900, 2}, {"0s", 1, 900, 1}, {"1h", 0, 900, 900}} {
		d, _ := time.ParseDuration(tt.d)
		if got := seconds(d, tt.lo, tt.hi); got != tt.want {
			t.Errorf("seconds(%s, %d, %d) = %d, want %d", tt.d, tt.lo, tt.hi, got, tt.want)
		}
	}
}
