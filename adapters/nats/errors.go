package nats

import (
	"errors"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

// permanentCodes are JetStream API error codes that fail the same way when
// retried. Anything not listed is transient.
var permanentCodes = map[jetstream.ErrorCode]bool{
	jetstream.JSErrCodeBadRequest:                    true,
	jetstream.JSErrCodeConsumerNameExists:            true,
	jetstream.JSErrCodeConsumerNotFound:              true,
	jetstream.JSErrCodeMaximumConsumersLimit:         true,
	jetstream.JSErrCodeMessageNotFound:               true,
	jetstream.JSErrCodeJetStreamNotEnabledForAccount: true,
	jetstream.JSErrCodeStreamMessageExceedsMaximum:   true,
	jetstream.JSErrCodeStreamNameInUse:               true,
	jetstream.JSErrCodeStreamNotFound:                true,
	jetstream.JSErrCodeStreamWrongLastSequence:       true,
	jetstream.JSErrCodeJetStreamNotEnabled:           true,
	jetstream.JSErrCodeConsumerAlreadyExists:         true,
	jetstream.JSErrCodeDuplicateFilterSubjects:       true,
	jetstream.JSErrCodeOverlappingFilterSubjects:     true,
	jetstream.JSErrCodeConsumerEmptyFilter:           true,
	jetstream.JSErrCodeConsumerExists:                true,
	jetstream.JSErrCodeConsumerDoesNotExist:          true,
	// 10065: subjects overlap with an existing stream.
	errCodeSubjectsOverlap: true,
	// 10099: multiple non-filtered consumers on a work-queue stream;
	// 10100: filtered consumer not unique on a work-queue stream.
	10099: true,
	10100: true,
}

// permanentErrs are client-side sentinels that fail the same way again.
var permanentErrs = []error{
	natsgo.ErrAuthorization,
	natsgo.ErrAuthExpired,
	natsgo.ErrAuthRevoked,
	natsgo.ErrAccountAuthExpired,
	natsgo.ErrMaxPayload,
	natsgo.ErrBadSubject,
	natsgo.ErrInvalidMsg,
	natsgo.ErrSecureConnRequired,
	natsgo.ErrSecureConnWanted,
	natsgo.ErrBadTimeout,
	jetstream.ErrJetStreamNotEnabled,
	jetstream.ErrJetStreamNotEnabledForAccount,
	jetstream.ErrStreamNotFound,
	jetstream.ErrConsumerNotFound,
	jetstream.ErrMsgNotFound,
	jetstream.ErrInvalidOption,
	jetstream.ErrMsgAlreadyAckd,
	jetstream.ErrNotJSMessage,
	jetstream.ErrInvalidStreamName,
	jetstream.ErrInvalidConsumerName,
	jetstream.ErrInvalidSubject,
	jetstream.ErrStreamNameRequired,
}

// unknownErrs leave it unknown whether a publish was stored: the message
// went out but its acknowledgement did not come back.
var unknownErrs = []error{
	jetstream.ErrAsyncPublishTimeout,
}

// classify wraps err for op with its class: context errors and anything
// unrecognised are transient.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var be *broker.Error
	if errors.As(err, &be) {
		return err
	}
	if broker.IsContext(err) {
		return broker.Wrap(op, broker.Transient, err)
	}
	if errors.Is(err, natsgo.ErrConnectionClosed) {
		return broker.Wrap(op, broker.Transient, err)
	}
	for _, u := range unknownErrs {
		if errors.Is(err, u) {
			return broker.Wrap(op, broker.UnknownOutcome, err)
		}
	}
	for _, p := range permanentErrs {
		if errors.Is(err, p) {
			return broker.Wrap(op, broker.Permanent, err)
		}
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && permanentCodes[apiErr.ErrorCode] {
		return broker.Wrap(op, broker.Permanent, err)
	}
	return broker.Wrap(op, broker.Transient, err)
}

// classifyPublishAck classifies an error that arrived while waiting for a
// publish acknowledgement: the message was sent, so anything but a definite
// refusal by the server leaves the outcome unknown.
func classifyPublishAck(op string, err error) error {
	if err == nil {
		return nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return classify(op, err)
	}
	if errors.Is(err, natsgo.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		// No stream listened: nothing was stored.
		return broker.Wrap(op, broker.Transient, err)
	}
	return broker.Wrap(op, broker.UnknownOutcome, err)
}

// errCodeSubjectsOverlap is JetStream's "subjects overlap with an existing
// stream" (nats.go has no constant for it).
const errCodeSubjectsOverlap jetstream.ErrorCode = 10065
