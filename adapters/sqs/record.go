package sqs

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/switchyard-dev/switchyard/broker"
)

// Record is one message that something other than this driver received
// from a lane's live queue and hands over to be run: an AWS Lambda
// event-source mapping's SQS record, above all (see package awslambda).
// The fields are those of the event; none of them is trusted.
type Record struct {
	// MessageID is SQS's MessageId.
	MessageID string
	// ReceiptHandle is the handle of the receive that returned the message:
	// acks, nacks and dead letters use it.
	ReceiptHandle string
	// Body is the message body as received.
	Body string
	// Attributes are the message's system attributes
	// (ApproximateReceiveCount, ApproximateFirstReceiveTimestamp,
	// MessageGroupId) as the event carries them.
	Attributes map[string]string
	// QueueName is the name of the queue the message came from (the last
	// part of the event source's ARN).
	QueueName string
}

// Outcome is what the driver last did with a delivery's message: whether
// it is gone from the live queue, was made visible again, or is still
// leased.
type Outcome int32

const (
	// OutcomeOpen: nothing settled it (or settling failed). The message is
	// still leased and comes back when its visibility timeout ends.
	OutcomeOpen Outcome = iota
	// OutcomeDeleted: it left the live queue — acked, dead-lettered, or
	// re-published as a fresh copy and deleted (a release, a hold).
	OutcomeDeleted
	// OutcomeReturned: its visibility was changed so that it comes back
	// after a delay (a nack, a deferral).
	OutcomeReturned
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case OutcomeDeleted:
		return "deleted"
	case OutcomeReturned:
		return "returned"
	}
	return "open"
}

// OutcomeOf reports what the driver last did with dv's message
// (OutcomeOpen for a delivery that is not this driver's).
func OutcomeOf(dv *broker.Delivery) Outcome {
	if dv == nil {
		return OutcomeOpen
	}
	h, ok := dv.Handle.(*handle)
	if !ok || h == nil {
		return OutcomeOpen
	}
	return Outcome(h.fate.Load())
}

// QueueNames returns the names of lane's live and dead-letter queues in
// the driver's namespace and mode.
func (d *Driver) QueueNames(lane string) (live, dead string) {
	return queueNames(d.cfg.Namespace, lane, d.cfg.FIFO)
}

// LaneOfQueue maps a live queue's name to its lane: one of lanes whose
// live queue has that name, or else the lane the name itself spells
// (names that carry a hash cannot be spelled back). Dead-letter and delay
// queues, and queues of another namespace or mode, map to no lane.
func (d *Driver) LaneOfQueue(name string, lanes []string) (string, bool) {
	for _, l := range lanes {
		if live, _ := d.QueueNames(l); live == name {
			return l, true
		}
	}
	lane, ok := d.laneOf(name)
	if !ok {
		return "", false
	}
	if live, _ := d.QueueNames(lane); live != name {
		return "", false // a dead-letter or delay queue of lane
	}
	return lane, true
}

// DeliveryFromRecord turns a record received from lane's live queue into a
// delivery this driver can ack, nack, extend and dead-letter, as if
// Receive had returned it. The attempt is the record's receive count (less
// one when the first receive only deferred a RunAt, as in Receive); the
// lease deadline is left zero, since the receiver owns the visibility
// timeout.
//
// A body that is not a Switchyard envelope gives a delivery carrying the
// body as received (ID the SQS MessageId) and an error matching
// broker.ErrUndecodable: dead-letter that delivery (with
// broker.ReasonUndecodable) and the body moves to the dead-letter queue as
// it came. A record without a receipt handle, or from a queue that is not
// lane's live queue, is refused with a broker.ErrInvalid error and no
// delivery.
func (d *Driver) DeliveryFromRecord(ctx context.Context, lane string, r Record) (*broker.Delivery, error) {
	lq, err := d.lane(ctx, "record", lane)
	if err != nil {
		return nil, err
	}
	if r.ReceiptHandle == "" {
		return nil, broker.Invalidf("record %q: no receipt handle", r.MessageID)
	}
	if live, _ := d.QueueNames(lane); r.QueueName != live {
		return nil, broker.Invalidf("record %q: queue %q is not the live queue %q of lane %q", r.MessageID, r.QueueName, live, lane)
	}
	h := &handle{queue: lq.url, receipt: r.ReceiptHandle, lane: lane, sqsID: r.MessageID}
	m, err := decodeBody(r.Body)
	if err != nil {
		h.raw = r.Body
		if h.raw == "" {
			h.raw = " " // SQS bodies are never empty; keep the record as received
		}
		return &broker.Delivery{Message: broker.Message{ID: r.MessageID, Lane: lane}, Attempt: 1, Handle: h},
			fmt.Errorf("record %q: %w", r.MessageID, err)
	}
	rc := recordAttr(r.Attributes, types.MessageSystemAttributeNameApproximateReceiveCount, 1)
	first := recordAttr(r.Attributes, types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp, 0)
	attempt := rc
	if !m.RunAt.IsZero() && first > 0 && first < m.RunAt.UnixMilli() {
		attempt-- // the first receive only deferred it
	}
	if m.Lane == "" {
		m.Lane = lane
	}
	return &broker.Delivery{Message: *m, Attempt: int(min(max(attempt, 1), int64(broker.MaxAttemptsLimit))), Handle: h}, nil
}

// recordAttr reads a numeric system attribute; a missing, malformed or
// negative one is def.
func recordAttr(attrs map[string]string, name types.MessageSystemAttributeName, def int64) int64 {
	v, ok := attrs[string(name)]
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return def
	}
	return n
}
