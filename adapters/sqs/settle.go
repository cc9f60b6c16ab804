package sqs

import (
	"context"
	"errors"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/switchyard-dev/switchyard/broker"
)

// Ack deletes the messages with DeleteMessageBatch, ten per call, grouped
// by queue. A handle that no longer holds the message gives ErrLeaseLost
// where SQS says so (FIFO queues do; standard queues accept a stale handle
// and keep the message, which is equally safe).
func (d *Driver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	if d.closed.Load() {
		return broker.ClosedError("ack")
	}
	hs, err := handles("ack", ds)
	if err != nil {
		return err
	}
	var firstErr error
	for _, chunk := range chunkByQueue(hs) {
		entries := make([]types.DeleteMessageBatchRequestEntry, len(chunk))
		for j, h := range chunk {
			entries[j] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), ReceiptHandle: aws.String(h.receipt)}
		}
		out, err := d.client.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(chunk[0].queue), Entries: entries})
		if err != nil {
			d.forget(chunk[0].lane, err)
			firstErr = cmpErr(firstErr, classify("ack", err))
			continue
		}
		failed := map[int]bool{}
		for _, f := range out.Failed {
			j, _ := strconv.Atoi(aws.ToString(f.Id))
			failed[j] = true
			firstErr = cmpErr(firstErr, entryError("ack", aws.ToString(f.Code), aws.ToString(f.Message), f.SenderFault))
			d.settle(ctx, chunk[j], true)
		}
		for j, h := range chunk {
			if !failed[j] {
				h.fate.Store(int32(OutcomeDeleted))
				d.settle(ctx, h, false)
			}
		}
	}
	return firstErr
}

// Nack makes the message visible again after delay (rounded up to whole
// seconds) with ChangeMessageVisibility; the next receive counts one more
// attempt.
func (d *Driver) Nack(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	if d.closed.Load() {
		return broker.ClosedError("nack")
	}
	h, err := handleOf("nack", dv)
	if err != nil {
		return err
	}
	_, err = d.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(h.queue), ReceiptHandle: aws.String(h.receipt),
		VisibilityTimeout: seconds(delay, 0, int32(maxVisibilitySQS/time.Second)),
	})
	d.settle(ctx, h, true)
	if err != nil {
		d.forget(h.lane, err)
		return classify("nack", err)
	}
	h.fate.Store(int32(OutcomeReturned))
	return nil
}

// Extend sets the visibility of the messages to lease from now with
// ChangeMessageVisibilityBatch. A delivery whose lease already ended gets
// ErrLeaseLost without a call: another consumer may hold it by now.
func (d *Driver) Extend(ctx context.Context, ds []*broker.Delivery, lease time.Duration) error {
	if d.closed.Load() {
		return broker.ClosedError("extend")
	}
	hs, err := handles("extend", ds)
	if err != nil {
		return err
	}
	byHandle := make(map[*handle]*broker.Delivery, len(ds))
	heldBack := map[*handle]bool{}
	var firstErr error
	var live []*handle
	now := time.Now()
	for i, h := range hs {
		if !ds[i].LeaseDeadline.IsZero() && !now.Before(ds[i].LeaseDeadline) {
			firstErr = cmpErr(firstErr, broker.LeaseLostError("extend", ds[i].ID))
			d.settle(ctx, h, true)
			continue
		}
		byHandle[h] = ds[i]
		live = append(live, h)
		// Keep a FIFO group's held-back messages leased as long as the one
		// being worked on.
		if h.group != "" && d.groups != nil {
			for _, p := range d.groups.held(h) {
				ph := p.Handle.(*handle)
				if !heldBack[ph] {
					byHandle[ph] = p
					heldBack[ph] = true
					live = append(live, ph)
				}
			}
		}
	}
	vt := seconds(lease, 0, int32(maxVisibilitySQS/time.Second))
	for _, chunk := range chunkByQueue(live) {
		sent := time.Now()
		failed, err := d.changeVisibilityBatch(ctx, chunk, vt)
		if err != nil {
			d.forget(chunk[0].lane, err)
			firstErr = cmpErr(firstErr, classify("extend", err))
			continue
		}
		for j, h := range chunk {
			dv := byHandle[h]
			if ferr, bad := failed[j]; bad {
				if heldBack[h] {
					d.groups.drop(h, dv)
					continue
				}
				firstErr = cmpErr(firstErr, ferr)
				if errors.Is(ferr, broker.ErrLeaseLost) {
					d.settle(ctx, h, true)
				}
				continue
			}
			dv.LeaseDeadline = sent.Add(time.Duration(vt) * time.Second)
		}
	}
	return firstErr
}

// changeVisibilityBatch sets the visibility of up to ten messages of one
// queue and returns the failed entries' errors by index.
func (d *Driver) changeVisibilityBatch(ctx context.Context, chunk []*handle, vt int32) (map[int]error, error) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
	for j, h := range chunk {
		entries[j] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(j)), ReceiptHandle: aws.String(h.receipt), VisibilityTimeout: vt,
		}
	}
	out, err := d.client.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{
		QueueUrl: aws.String(chunk[0].queue), Entries: entries,
	})
	if err != nil {
		return nil, err
	}
	failed := map[int]error{}
	for _, f := range out.Failed {
		j, _ := strconv.Atoi(aws.ToString(f.Id))
		failed[j] = entryError("extend", aws.ToString(f.Code), aws.ToString(f.Message), f.SenderFault)
	}
	return failed, nil
}

// changeVisibility sets the visibility of deliveries, best effort.
func (d *Driver) changeVisibility(ctx context.Context, ds []*broker.Delivery, vt int32) {
	hs := make([]*handle, 0, len(ds))
	for _, dv := range ds {
		if h, ok := dv.Handle.(*handle); ok {
			hs = append(hs, h)
		}
	}
	for _, chunk := range chunkByQueue(hs) {
		_, _ = d.changeVisibilityBatch(ctx, chunk, vt)
	}
}

// settle ends a handed-out FIFO delivery for the group tracker (once);
// release makes the group's held-back messages visible again at once.
func (d *Driver) settle(ctx context.Context, h *handle, release bool) {
	if d.groups == nil || h.group == "" || h.dead || h.settled.Swap(true) {
		return
	}
	if rest := d.groups.done(h, release); len(rest) > 0 {
		d.changeVisibility(context.WithoutCancel(ctx), rest, 0)
	}
}

// DeadLetter sends the message to the lane's dead-letter queue with the
// record in the switchyard-dead-letter attribute, then deletes it from the
// live queue. A crash between the two leaves it in both, never in neither.
func (d *Driver) DeadLetter(ctx context.Context, dv *broker.Delivery, dl *broker.DeadLetter) error {
	if d.closed.Load() {
		return broker.ClosedError("dead-letter")
	}
	h, err := handleOf("dead-letter", dv)
	if err != nil {
		return err
	}
	if dl == nil {
		return broker.Invalidf("dead-letter: nil record")
	}
	lq, err := d.lane(ctx, "dead-letter", h.lane)
	if err != nil {
		return err
	}
	body := h.raw // a dead letter's or an undecodable record's body, as received
	if body == "" {
		body = encodeBody(&dv.Message)
	}
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(lq.dlqURL), MessageBody: aws.String(body)}
	if err := d.attachRecord(in, dl, lq.dlqMax); err != nil {
		return err
	}
	if d.cfg.FIFO {
		in.MessageGroupId = aws.String(groupID(&broker.Message{ID: dv.ID}))
		in.MessageDeduplicationId = aws.String(hashID("d", h.receipt))
	}
	if _, err := d.client.SendMessage(ctx, in); err != nil {
		d.forget(h.lane, err)
		return classify("dead-letter", err)
	}
	_, err = d.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(h.queue), ReceiptHandle: aws.String(h.receipt)})
	d.settle(ctx, h, err != nil)
	if err == nil {
		h.fate.Store(int32(OutcomeDeleted))
	}
	return classify("dead-letter", err)
}

// attachRecord puts dl on in as the switchyard-dead-letter attribute,
// trimming the attempt history and error text if the message would exceed
// the dead-letter queue's size limit.
func (d *Driver) attachRecord(in *awssqs.SendMessageInput, dl *broker.DeadLetter, maxSize int) error {
	rec := *dl
	for try := 0; ; try++ {
		b, err := broker.EncodeDeadLetter(&rec)
		if err != nil {
			return broker.Wrap("dead-letter", broker.Permanent, err)
		}
		size := len(aws.ToString(in.MessageBody)) + len(attrDeadLetter) + len("String") + len(b)
		if size <= maxSize {
			in.MessageAttributes = map[string]types.MessageAttributeValue{
				attrDeadLetter: {DataType: aws.String("String"), StringValue: aws.String(string(b))},
			}
			return nil
		}
		switch try {
		case 0:
			if n := len(rec.Attempts); n > 10 {
				rec.Attempts = append([]broker.AttemptRecord{rec.Attempts[0]}, rec.Attempts[n-9:]...)
			}
			rec.Error = truncate(rec.Error, 4096)
		case 1:
			rec.Attempts = nil
			rec.Error = truncate(rec.Error, 256)
		default:
			return &broker.Error{Op: "dead-letter", Class: broker.Permanent, Kind: broker.ErrTooLarge,
				Err: &broker.TooLargeError{Size: size, Max: maxSize}}
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// Replay sends a dead letter back to its live queue as a new SQS message
// (so its receive count, and the attempt, start again at 1), then deletes
// it from the dead-letter queue.
func (d *Driver) Replay(ctx context.Context, dv *broker.Delivery) error {
	if d.closed.Load() {
		return broker.ClosedError("replay")
	}
	h, err := handleOf("replay", dv)
	if err != nil {
		return err
	}
	if !h.dead {
		return broker.Invalidf("replay: delivery %s is not from a dead-letter queue", dv.ID)
	}
	lq, err := d.lane(ctx, "replay", h.lane)
	if err != nil {
		return err
	}
	body := h.raw
	if _, derr := decodeBody(h.raw); derr == nil {
		body = encodeBody(&dv.Message)
	}
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(lq.url), MessageBody: aws.String(body)}
	if d.cfg.FIFO {
		in.MessageGroupId = aws.String(groupID(&dv.Message))
		in.MessageDeduplicationId = aws.String(hashID("r", h.receipt))
	}
	if _, err := d.client.SendMessage(ctx, in); err != nil {
		d.forget(h.lane, err)
		return classify("replay", err)
	}
	_, err = d.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(h.queue), ReceiptHandle: aws.String(h.receipt)})
	return classify("replay", err)
}

// Stats reads the Approximate* attributes of the lane's queues. On FIFO
// queues, messages deferred to a future RunAt count as in flight.
func (d *Driver) Stats(ctx context.Context, lane string) (broker.Stats, error) {
	lq, err := d.lane(ctx, "stats", lane)
	if err != nil {
		return broker.Stats{}, err
	}
	names := []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}
	live, err := d.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(lq.url), AttributeNames: names})
	if err != nil {
		d.forget(lane, err)
		return broker.Stats{}, classify("stats", err)
	}
	dead, err := d.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(lq.dlqURL), AttributeNames: names})
	if err != nil {
		d.forget(lane, err)
		return broker.Stats{}, classify("stats", err)
	}
	n := func(attrs map[string]string, name types.QueueAttributeName) int64 {
		v, _ := strconv.ParseInt(attrs[string(name)], 10, 64)
		return v
	}
	s := broker.Stats{
		Lane:     lane,
		Ready:    n(live.Attributes, names[0]),
		InFlight: n(live.Attributes, names[1]),
		Delayed:  n(live.Attributes, names[2]),
	}
	for _, name := range names {
		s.DeadLettered += n(dead.Attributes, name)
	}
	if lq.delayURL != "" {
		delayed, err := d.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(lq.delayURL), AttributeNames: names})
		if err != nil {
			d.forget(lane, err)
			return broker.Stats{}, classify("stats", err)
		}
		for _, name := range names {
			s.Delayed += n(delayed.Attributes, name)
		}
	}
	return s, nil
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

// chunkByQueue splits handles into batches of at most ten of one queue,
// keeping their order within a queue.
func chunkByQueue(hs []*handle) [][]*handle {
	var order []string
	by := map[string][]*handle{}
	for _, h := range hs {
		if _, ok := by[h.queue]; !ok {
			order = append(order, h.queue)
		}
		by[h.queue] = append(by[h.queue], h)
	}
	var out [][]*handle
	for _, q := range order {
		list := by[q]
		for len(list) > 0 {
			n := min(len(list), maxBatchSQS)
			out = append(out, list[:n])
			list = list[n:]
		}
	}
	return out
}
