package gcppubsub

import (
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-dev/switchyard/broker"
)

// codeClass is the classification of one gRPC status code.
type codeClass struct {
	class broker.Class
	kind  error // optional specific sentinel
}

// statusCodes classifies the gRPC codes Pub/Sub answers with. Codes not
// listed are transient.
var statusCodes = map[codes.Code]codeClass{
	codes.Unavailable:        {broker.Transient, nil},
	codes.ResourceExhausted:  {broker.Transient, nil}, // quota, flow control
	codes.Aborted:            {broker.Transient, nil},
	codes.Internal:           {broker.Transient, nil},
	codes.Unknown:            {broker.Transient, nil},
	codes.DeadlineExceeded:   {broker.Transient, nil},
	codes.Canceled:           {broker.Transient, nil},
	codes.InvalidArgument:    {broker.Permanent, broker.ErrInvalid},
	codes.FailedPrecondition: {broker.Permanent, broker.ErrInvalid},
	codes.OutOfRange:         {broker.Permanent, broker.ErrInvalid},
	codes.AlreadyExists:      {broker.Permanent, broker.ErrInvalid},
	codes.NotFound:           {broker.Permanent, nil},
	codes.PermissionDenied:   {broker.Permanent, nil},
	codes.Unauthenticated:    {broker.Permanent, nil},
	codes.Unimplemented:      {broker.Permanent, broker.ErrUnsupported},
}

// classify wraps a client error for op. Context errors stay recognisable
// (and transient). For a publish, a failure after the request may have
// reached Pub/Sub (a deadline, a dropped connection, an unknown or internal
// error) is an unknown outcome: the message may have been stored.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var be *broker.Error
	if errors.As(err, &be) {
		return err
	}
	if broker.IsContext(err) {
		if op == "publish" {
			return &broker.Error{Op: op, Class: broker.UnknownOutcome, Err: err}
		}
		return broker.Wrap(op, broker.Transient, err)
	}
	st, ok := status.FromError(err)
	if !ok {
		return broker.Wrap(op, broker.Transient, err)
	}
	c, known := statusCodes[st.Code()]
	if !known {
		c = codeClass{broker.Transient, nil}
	}
	if st.Code() == codes.InvalidArgument && strings.Contains(strings.ToLower(st.Message()), "too large") {
		c = codeClass{broker.Permanent, broker.ErrTooLarge}
	}
	if op == "publish" && c.class == broker.Transient && !neverSent(st) {
		c = codeClass{broker.UnknownOutcome, nil}
	}
	return &broker.Error{Op: op, Class: c.class, Kind: c.kind, Err: err}
}

// neverSent reports a status that says the request never reached a
// server: a connection that could not be made.
func neverSent(st *status.Status) bool {
	if st.Code() == codes.ResourceExhausted {
		return true // refused by quota or flow control: not stored
	}
	if st.Code() != codes.Unavailable {
		return false
	}
	m := strings.ToLower(st.Message())
	return strings.Contains(m, "connection refused") || strings.Contains(m, "error while dialing") ||
		strings.Contains(m, "no such host") || strings.Contains(m, "connection active") && strings.Contains(m, "dial")
}

// ackFailures returns, for a subscription with exactly-once delivery, the
// ack IDs Pub/Sub reports as failed in err's ErrorInfo, with whether each
// failure is permanent (the ack ID is no longer valid: the lease was lost)
// or transient. ok is false when err carries no such details.
func ackFailures(err error) (failed map[string]bool, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus {
		return nil, false
	}
	for _, d := range st.Details() {
		info, isInfo := d.(*errdetails.ErrorInfo)
		if !isInfo || len(info.GetMetadata()) == 0 {
			continue
		}
		failed = map[string]bool{}
		for id, reason := range info.GetMetadata() {
			failed[id] = strings.HasPrefix(reason, "PERMANENT_")
		}
		return failed, true
	}
	return nil, false
}
