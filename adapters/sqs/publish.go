package sqs

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/switchyard-dev/switchyard/broker"
)

// maxBatchPayload is SQS's limit on the summed bodies of one
// SendMessageBatch (the same as the largest message).
const maxBatchPayload = 1 << 20

// Publish sends msgs with SendMessageBatch, ten (and at most 1 MiB) per
// call, grouped by lane. Every failure is reported per message.
func (d *Driver) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	if d.closed.Load() {
		return nil, broker.ClosedError("publish")
	}
	res := make([]broker.PublishResult, len(msgs))
	byLane := map[string][]int{}
	var order []string
	for i, m := range msgs {
		if m == nil {
			res[i].Err = broker.Invalidf("publish: nil message")
			continue
		}
		res[i].ID = m.ID
		if m.MaxAttempts > d.cfg.MaxReceives {
			// Every receive counts toward the redrive policy, nacks
			// included: SQS would cut the message's attempts short.
			res[i].Err = broker.Invalidf("sqs: publish: max attempts %d is above the queues' max_receives %d (the redrive policy's maxReceiveCount), "+
				"which would dead-letter the message early: lower MaxAttempts or open with max_receives up to %d", m.MaxAttempts, d.cfg.MaxReceives, maxReceivesSQS)
			continue
		}
		if _, ok := byLane[m.Lane]; !ok {
			order = append(order, m.Lane)
		}
		byLane[m.Lane] = append(byLane[m.Lane], i)
	}
	for _, lane := range order {
		idx := byLane[lane]
		lq, err := d.lane(ctx, "publish", lane)
		if err != nil {
			for _, i := range idx {
				res[i].Err = err
			}
			continue
		}
		d.publishLane(ctx, lane, lq, msgs, idx, res)
	}
	return res, nil
}

type pubEntry struct {
	i     int
	entry types.SendMessageBatchRequestEntry
	key   string // FIFO dedup-cache key claimed for this entry
}

func (d *Driver) publishLane(ctx context.Context, lane string, lq *laneQueues, msgs []*broker.Message, idx []int, res []broker.PublishResult) {
	now := time.Now()
	var batch, delayed []pubEntry
	size := 0
	queue := lq.url
	flush := func() {
		if len(batch) > 0 {
			d.sendBatch(ctx, lane, lq, queue, batch, msgs, res)
		}
		batch, size = batch[:0], 0
	}
	for _, i := range idx {
		m := msgs[i]
		body := encodeBody(m)
		if len(body) > lq.maxSize {
			max := maxMessageSize(lq.maxSize)
			res[i].Err = &broker.Error{Op: "publish", Class: broker.Permanent, Kind: broker.ErrTooLarge,
				Err: &broker.TooLargeError{Size: m.Size(), Max: max}}
			continue
		}
		e := pubEntry{i: i, entry: types.SendMessageBatchRequestEntry{
			Id:          aws.String(strconv.Itoa(i)),
			MessageBody: aws.String(body),
		}}
		var delay int32
		if !m.RunAt.IsZero() && m.RunAt.After(now) {
			delay = seconds(m.RunAt.Sub(now), 0, int32(maxDelaySQS/time.Second))
		}
		if d.cfg.FIFO {
			if m.IdempotencyKey != "" {
				e.key = dedupID(m)
				if first, dup := d.dedup.claim(lq.url, e.key, m.ID, now); dup {
					res[i] = broker.PublishResult{ID: first, Duplicate: true}
					continue
				}
			}
			if delay > 0 {
				// FIFO queues have no per-message delay: the message waits
				// in the lane's standard delay queue (see mover.go).
				e.entry.DelaySeconds = delay
				delayed = append(delayed, e)
				continue
			}
			e.entry.MessageGroupId = aws.String(groupID(m))
			e.entry.MessageDeduplicationId = aws.String(dedupID(m))
		} else {
			e.entry.DelaySeconds = delay
		}
		if len(batch) == maxBatchSQS || (len(batch) > 0 && size+len(body) > maxBatchPayload) {
			flush()
		}
		batch = append(batch, e)
		size += len(body)
	}
	flush()
	if len(delayed) > 0 {
		queue = lq.delayURL
		for _, e := range delayed {
			body := aws.ToString(e.entry.MessageBody)
			if len(batch) == maxBatchSQS || (len(batch) > 0 && size+len(body) > maxBatchPayload) {
				flush()
			}
			batch = append(batch, e)
			size += len(body)
		}
		flush()
	}
}

func (d *Driver) sendBatch(ctx context.Context, lane string, lq *laneQueues, queue string, batch []pubEntry, msgs []*broker.Message, res []broker.PublishResult) {
	entries := make([]types.SendMessageBatchRequestEntry, len(batch))
	for j, e := range batch {
		entries[j] = e.entry
	}
	out, err := d.client.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: entries})
	if err != nil {
		d.forget(lane, err)
		err = classify("publish", err)
		for _, e := range batch {
			res[e.i].Err = err
			d.releaseKey(lq, e, msgs, err)
		}
		return
	}
	byID := make(map[string]pubEntry, len(batch))
	for _, e := range batch {
		byID[aws.ToString(e.entry.Id)] = e
	}
	for _, f := range out.Failed {
		e, ok := byID[aws.ToString(f.Id)]
		if !ok {
			continue
		}
		delete(byID, aws.ToString(f.Id))
		err := entryError("publish", aws.ToString(f.Code), aws.ToString(f.Message), f.SenderFault)
		res[e.i].Err = err
		d.releaseKey(lq, e, msgs, err)
	}
	ok := make(map[string]bool, len(out.Successful))
	for _, s := range out.Successful {
		ok[aws.ToString(s.Id)] = true
	}
	for id, e := range byID {
		if !ok[id] {
			// Neither successful nor failed: SQS did not say.
			err := &broker.Error{Op: "publish", Class: broker.UnknownOutcome, Err: errNoEntryResult}
			res[e.i].Err = err
		}
	}
}

func (d *Driver) releaseKey(lq *laneQueues, e pubEntry, msgs []*broker.Message, err error) {
	if e.key != "" && broker.ClassOf(err) != broker.UnknownOutcome {
		d.dedup.release(lq.url, e.key, msgs[e.i].ID)
	}
}

type constError string

func (e constError) Error() string { return string(e) }

const errNoEntryResult = constError("sqs: the batch response has no result for this entry")
