package sqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/switchyard-dev/switchyard/broker"
)

// leaseSlack bounds the time between SQS starting a visibility timeout and
// the response reaching the driver. Reported lease deadlines are this much
// early at most, never late.
const leaseSlack = 250 * time.Millisecond

// The short polls that fill a sub-second rest of a receive's wait are
// paced per queue (pollPace, shared by every Receive of the queue in this
// driver): the first after a poll that found messages goes out at once, the
// next after an empty one firstPollGap later, the gap doubling with every
// empty poll in a row up to shortPollGap. A fixed gap of 100 ms after
// every empty poll, counted per Receive call, left a message that arrived
// just after an empty poll waiting for the whole gap (with the runtime
// benchmarks' PollWait of 50 ms: enqueue → start 26–37 ms at p50 at 1,000
// tasks/s on the emulator, where one poll in eight came back empty), and
// polled twice per call at its boundaries. An idle queue is polled every
// shortPollGap whatever the callers' waits. With a wait of a second or
// more (the scheduler's default) SQS long-polls whole seconds instead.
const (
	firstPollGap = 10 * time.Millisecond
	shortPollGap = 100 * time.Millisecond
)

// pollPace spaces one queue's short polls (see firstPollGap).
type pollPace struct {
	mu        sync.Mutex
	lastEmpty time.Time     // when the last poll, if empty, returned; zero after one with messages
	gap       time.Duration // the wait after lastEmpty
}

// delay is how long after now the next short poll may go out.
func (p *pollPace) delay(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastEmpty.IsZero() {
		return 0
	}
	return p.lastEmpty.Add(p.gap).Sub(now)
}

// polled records a poll that returned n messages at now.
func (p *pollPace) polled(now time.Time, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case n > 0:
		p.lastEmpty, p.gap = time.Time{}, 0
	case p.lastEmpty.IsZero():
		p.lastEmpty, p.gap = now, firstPollGap
	default:
		p.lastEmpty, p.gap = now, min(2*p.gap, shortPollGap)
	}
}

var receiveAttrs = []types.MessageSystemAttributeName{
	types.MessageSystemAttributeNameApproximateReceiveCount,
	types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp,
	types.MessageSystemAttributeNameMessageGroupId,
}

// Receive long-polls the lane's queue (or its dead-letter queue) with
// ReceiveMessage, ten messages per call at most, the visibility timeout
// being the lease rounded up to whole seconds.
//
// On live queues it also: dead-letters undecodable bodies with
// ReasonUndecodable; defers messages whose RunAt is still ahead (FIFO
// queues have no per-message delay) by setting their visibility to the
// time left; and, on FIFO queues, holds back all but the first message of
// a group (see groupTracker).
func (d *Driver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	lq, err := d.lane(ctx, "receive", req.Lane)
	if err != nil {
		return nil, err
	}
	want := min(max(req.Max, 1), maxBatchSQS)
	vt := seconds(req.Lease, 1, int32(maxVisibilitySQS/time.Second))
	queue := lq.url
	if req.DeadLetters {
		queue = lq.dlqURL
	}
	var out []*broker.Delivery
	if d.groups != nil && !req.DeadLetters {
		d.startMover(req.Lane, lq)
		out = d.takeHeld(ctx, queue, want, vt)
	}
	deadline := time.Now().Add(req.Wait)
	pace := &lq.livePace
	if req.DeadLetters {
		pace = &lq.deadPace
	}
	for len(out) == 0 {
		// Long-poll whole seconds only: a poll must never outlast the
		// caller's wait (the message it takes would be leased to a caller
		// that has stopped listening). A sub-second rest is spent in short
		// polls paced per queue (see firstPollGap).
		wait := time.Until(deadline).Truncate(time.Second)
		if wait == 0 && req.Wait > 0 {
			if d := pace.delay(time.Now()); d > 0 {
				left := time.Until(deadline)
				t := time.NewTimer(min(d, max(left, 0)))
				select {
				case <-ctx.Done():
					t.Stop()
					return nil, nil
				case <-t.C:
				}
				if d > left {
					break // the wait ends before the next poll is due
				}
			}
		}
		sent := time.Now()
		in := &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(queue),
			MaxNumberOfMessages:         int32(want - len(out)),
			VisibilityTimeout:           vt,
			WaitTimeSeconds:             seconds(wait, 0, int32(maxWaitSQS/time.Second)),
			MessageSystemAttributeNames: receiveAttrs,
		}
		if req.DeadLetters {
			in.MessageAttributeNames = []string{attrDeadLetter}
		}
		if d.cfg.FIFO {
			// The SDK's retries of this call resend it as is: on a FIFO
			// queue SQS then returns the messages the lost attempt took
			// (see receiveAttemptID).
			in.ReceiveRequestAttemptId = aws.String(receiveAttemptID())
		}
		resp, err := d.receiveMessage(ctx, in)
		if err == nil {
			pace.polled(time.Now(), len(resp.Messages))
		}
		if err != nil {
			d.forget(req.Lane, err)
			if len(out) > 0 {
				return out, nil
			}
			return nil, classify("receive", err)
		}
		now := time.Now()
		start := now.Add(-leaseSlack)
		if start.Before(sent) {
			start = sent
		}
		leaseEnd := start.Add(time.Duration(vt) * time.Second)
		if req.DeadLetters {
			for _, m := range resp.Messages {
				out = append(out, d.deadDelivery(req.Lane, queue, m, leaseEnd))
			}
		} else {
			ds, err := d.liveDeliveries(ctx, req.Lane, lq, resp.Messages, leaseEnd, now)
			out = append(out, ds...)
			if err != nil && len(out) == 0 {
				return nil, err
			}
		}
		if req.Wait <= 0 || time.Until(deadline) <= 0 {
			break
		}
	}
	return out, nil
}

// liveDeliveries turns received live messages into deliveries, moving
// undecodable ones to the dead-letter queue and deferring early ones.
func (d *Driver) liveDeliveries(ctx context.Context, lane string, lq *laneQueues, msgs []types.Message, leaseEnd, now time.Time) ([]*broker.Delivery, error) {
	var (
		out      []*broker.Delivery
		bad      []badMessage
		deferred []deferral
		seen     = map[string]bool{}
	)
	for _, sm := range msgs {
		h := &handle{queue: lq.url, receipt: aws.ToString(sm.ReceiptHandle), lane: lane, sqsID: aws.ToString(sm.MessageId)}
		m, err := decodeBody(aws.ToString(sm.Body))
		if err != nil {
			bad = append(bad, badMessage{h: h, body: aws.ToString(sm.Body), err: err})
			continue
		}
		rc := intAttr(sm.Attributes, types.MessageSystemAttributeNameApproximateReceiveCount, 1)
		first := intAttr(sm.Attributes, types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp, 0)
		if !m.RunAt.IsZero() {
			// A receive before RunAt is a deferral, not an attempt. The
			// first receive is judged by SQS's own timestamp, later ones
			// (after a failed deferral) by the local clock.
			ref := now
			if rc == 1 && first > 0 {
				ref = time.UnixMilli(first)
			}
			if m.RunAt.After(ref) {
				deferred = append(deferred, deferral{h: h, left: m.RunAt.Sub(now)})
				continue
			}
		}
		attempt := rc
		if !m.RunAt.IsZero() && first > 0 && first < m.RunAt.UnixMilli() {
			attempt-- // the first receive only deferred it
		}
		dv := &broker.Delivery{Message: *m, Attempt: int(max(attempt, 1)), LeaseDeadline: leaseEnd, Handle: h}
		if d.groups != nil {
			h.group = sm.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
			fresh := !seen[h.group]
			seen[h.group] = true
			if !d.groups.admit(h, dv, fresh) {
				continue
			}
		}
		out = append(out, dv)
	}
	for _, df := range deferred {
		// Best effort: if it fails, the message comes back after the lease
		// and is deferred again.
		_, _ = d.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(df.h.queue), ReceiptHandle: aws.String(df.h.receipt),
			VisibilityTimeout: seconds(df.left, 0, int32(maxVisibilitySQS/time.Second)),
		})
	}
	var err error
	if len(bad) > 0 {
		err = d.deadLetterUndecodable(ctx, lq, bad)
	}
	return out, err
}

type badMessage struct {
	h    *handle
	body string
	err  error
}

type deferral struct {
	h    *handle
	left time.Duration
}

// deadLetterUndecodable moves bodies that are not Switchyard envelopes to
// the dead-letter queue as they are, with ReasonUndecodable, and deletes
// them from the live queue. Broker never sees them.
func (d *Driver) deadLetterUndecodable(ctx context.Context, lq *laneQueues, bad []badMessage) error {
	var firstErr error
	for _, b := range bad {
		dl := &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: b.err.Error(), At: time.Now().UTC()}
		in := &awssqs.SendMessageInput{QueueUrl: aws.String(lq.dlqURL), MessageBody: aws.String(b.body)}
		if err := d.attachRecord(in, dl, lq.dlqMax); err != nil {
			firstErr = cmpErr(firstErr, err)
			continue
		}
		if d.cfg.FIFO {
			in.MessageGroupId = aws.String(hashID("u#", b.h.sqsID))
			in.MessageDeduplicationId = aws.String(hashID("d", b.h.receipt))
		}
		if _, err := d.client.SendMessage(ctx, in); err != nil {
			firstErr = cmpErr(firstErr, classify("receive: dead-letter undecodable", err))
			continue
		}
		if _, err := d.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(b.h.queue), ReceiptHandle: aws.String(b.h.receipt)}); err != nil {
			firstErr = cmpErr(firstErr, classify("receive: dead-letter undecodable", err))
		}
	}
	return firstErr
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// deadDelivery turns a message received from a dead-letter queue into a
// delivery. Messages without the framework's record were moved by SQS's
// redrive policy (ReasonDeliveryLimit).
func (d *Driver) deadDelivery(lane, queue string, sm types.Message, leaseEnd time.Time) *broker.Delivery {
	body := aws.ToString(sm.Body)
	h := &handle{queue: queue, receipt: aws.ToString(sm.ReceiptHandle), lane: lane, dead: true, sqsID: aws.ToString(sm.MessageId), raw: body}
	rc := intAttr(sm.Attributes, types.MessageSystemAttributeNameApproximateReceiveCount, 1)
	dv := &broker.Delivery{Attempt: int(rc), LeaseDeadline: leaseEnd, Handle: h}
	m, decErr := decodeBody(body)
	if decErr == nil {
		dv.Message = *m
	} else {
		dv.Message = broker.Message{ID: h.sqsID, Lane: lane, Body: []byte(body)}
	}
	if av, ok := sm.MessageAttributes[attrDeadLetter]; ok && av.StringValue != nil {
		if dl, err := broker.DecodeDeadLetter([]byte(*av.StringValue)); err == nil {
			dv.DeadLetter = dl
		}
	}
	if dv.DeadLetter == nil {
		if decErr != nil {
			dv.DeadLetter = &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: decErr.Error()}
		} else {
			dv.DeadLetter = &broker.DeadLetter{Reason: broker.ReasonDeliveryLimit,
				Error: fmt.Sprintf("moved to the dead-letter queue by the SQS redrive policy (maxReceiveCount %d)", d.cfg.MaxReceives)}
		}
	}
	if n := len(dv.DeadLetter.Attempts); n > 0 && dv.DeadLetter.Attempts[n-1].Attempt > 0 {
		dv.Attempt = dv.DeadLetter.Attempts[n-1].Attempt
	}
	return dv
}

// takeHeld hands out held-back FIFO deliveries whose group is free again,
// renewing their leases first.
func (d *Driver) takeHeld(ctx context.Context, queue string, want int, vt int32) []*broker.Delivery {
	var out []*broker.Delivery
	for len(out) < want {
		ds := d.groups.ready(queue, want-len(out))
		if len(ds) == 0 {
			break
		}
		for _, dv := range ds {
			h := dv.Handle.(*handle)
			// A held-back message whose lease ran out may already be with
			// another consumer: give it up.
			if time.Until(dv.LeaseDeadline) > time.Second {
				sent := time.Now()
				_, err := d.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
					QueueUrl: aws.String(h.queue), ReceiptHandle: aws.String(h.receipt), VisibilityTimeout: vt,
				})
				if err == nil {
					dv.LeaseDeadline = sent.Add(time.Duration(vt) * time.Second)
					out = append(out, dv)
					continue
				}
			}
			// Not handed out: free the group and let SQS redeliver the rest.
			if rest := d.groups.done(h, true); len(rest) > 0 {
				d.changeVisibility(ctx, rest, 0)
			}
		}
	}
	return out
}

// abandonGrace bounds a ReceiveMessage call whose caller has gone, beyond
// the call's own long-poll wait.
const abandonGrace = 30 * time.Second

// receiveMessage calls ReceiveMessage without letting ctx cancel the
// call. SQS leases the messages of a receive before its response is read:
// a call cancelled mid-response (the SDK then logs "failed to discard
// remaining HTTP response body") has taken messages that nobody gets until
// their visibility timeout ends. Here the call runs on, and what it brings
// for a caller whose ctx has ended is made visible again at once
// (ChangeMessageVisibilityBatch to 0; that delivery counts in
// ApproximateReceiveCount, as any receive does: the next one has the next
// attempt number), and the caller gets ctx's error.
//
// A long poll (WaitTimeSeconds > 0) runs on its own goroutine, so its
// caller returns as soon as ctx ends. A short poll runs on the caller's:
// it ends within its round trip, and a goroutine and a channel a call
// cost about a tenth of the Server's CPU a task on the emulator (paced
// short polls bring few messages each). Either is cancelled when the
// driver closes, or abandonGrace after its wait.
func (d *Driver) receiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput) (*awssqs.ReceiveMessageOutput, error) {
	if ctx.Done() == nil {
		return d.client.ReceiveMessage(ctx, in)
	}
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(in.WaitTimeSeconds)*time.Second+abandonGrace)
	stop := context.AfterFunc(d.bg, cancel) // Close ends the call
	if in.WaitTimeSeconds == 0 {
		out, err := d.client.ReceiveMessage(callCtx, in)
		stop()
		cancel()
		if ctx.Err() != nil {
			if err == nil {
				go d.giveBack(in, out)
			}
			return nil, ctx.Err()
		}
		return out, err
	}
	type result struct {
		out *awssqs.ReceiveMessageOutput
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer stop()
		defer cancel()
		out, err := d.client.ReceiveMessage(callCtx, in)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-ctx.Done():
	}
	go func() {
		if r := <-done; r.err == nil {
			d.giveBack(in, r.out)
		}
	}()
	return nil, ctx.Err()
}

// giveBack makes the messages of a receive whose caller has gone visible
// again at once.
func (d *Driver) giveBack(in *awssqs.ReceiveMessageInput, out *awssqs.ReceiveMessageOutput) {
	if len(out.Messages) == 0 {
		return
	}
	hs := make([]*handle, len(out.Messages))
	for i, m := range out.Messages {
		hs[i] = &handle{queue: aws.ToString(in.QueueUrl), receipt: aws.ToString(m.ReceiptHandle)}
	}
	hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, chunk := range chunkByQueue(hs) {
		if _, err := d.changeVisibilityBatch(hctx, chunk, 0); err != nil {
			d.log.Warn("sqs: giving back the messages of an abandoned receive failed; they come back after their visibility timeout", "queue", aws.ToString(in.QueueUrl), "messages", len(chunk), "error", err)
		}
	}
}

// receiveAttemptID is a fresh ReceiveRequestAttemptId for one
// ReceiveMessage call on a FIFO queue. When a response is lost (a
// connection reset while reading it), the SDK retries the call with the
// same input; with the same attempt ID, SQS answers the retry with the
// messages and receipt handles of the lost attempt instead of leasing
// others, so the first ones are not left leased to nobody until their
// visibility timeout ends. Standard queues have no such parameter. (The
// emulator fauxqs 1.9.2 ignores it.)
func receiveAttemptID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

func intAttr(attrs map[string]string, name types.MessageSystemAttributeName, def int64) int64 {
	if v, ok := attrs[string(name)]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return def
}
