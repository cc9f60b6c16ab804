package sqs

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// FIFO queues accept no per-message DelaySeconds. A FIFO lane therefore
// has a standard delay queue: Publish sends a message with a future RunAt
// there with DelaySeconds, and every consumer of the lane runs a mover
// that long-polls the delay queue and moves due messages into the FIFO
// queue (send, then delete). A crash between the two is harmless: the
// move's deduplication ID is derived from the message, so SQS drops the
// second copy within its 5-minute window.
//
// A delayed message joins its ordering group when it is moved, i.e. at
// its RunAt, not at publish.

const (
	moverLease = 10 * time.Second // visibility of messages being moved
	moverPause = time.Second      // pause after a failed poll or move
)

// startMover starts lq's mover once per driver.
func (d *Driver) startMover(lane string, lq *laneQueues) {
	lq.mu.Lock()
	if lq.moving || lq.delayURL == "" || d.closed.Load() {
		lq.mu.Unlock()
		return
	}
	lq.moving = true
	lq.mu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for d.bg.Err() == nil {
			if err := d.moveDue(d.bg, lq); err != nil {
				d.forget(lane, err)
				pause(d.bg, moverPause)
			}
		}
	}()
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// moveDue long-polls the delay queue once and moves what is due.
func (d *Driver) moveDue(ctx context.Context, lq *laneQueues) error {
	resp, err := d.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
		QueueUrl:            aws.String(lq.delayURL),
		MaxNumberOfMessages: maxBatchSQS,
		VisibilityTimeout:   int32(moverLease / time.Second),
		WaitTimeSeconds:     int32(maxWaitSQS / time.Second),
	})
	if err != nil || len(resp.Messages) == 0 {
		return err
	}
	// The move must finish even while Close cancels the poll.
	ctx = context.WithoutCancel(ctx)
	ctx, cancel := context.WithTimeout(ctx, moverLease)
	defer cancel()
	now := time.Now()
	var entries []types.SendMessageBatchRequestEntry
	var receipts []string
	for _, sm := range resp.Messages {
		body := aws.ToString(sm.Body)
		e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(len(entries))), MessageBody: aws.String(body)}
		if m, err := decodeBody(body); err == nil {
			if m.RunAt.After(now) {
				// Not due yet (a delay beyond SQS's 15 minutes): wait more.
				_, _ = d.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
					QueueUrl: aws.String(lq.delayURL), ReceiptHandle: sm.ReceiptHandle,
					VisibilityTimeout: seconds(m.RunAt.Sub(now), 0, int32(maxVisibilitySQS/time.Second)),
				})
				continue
			}
			e.MessageGroupId = aws.String(groupID(m))
			e.MessageDeduplicationId = aws.String(dedupID(m))
		} else {
			// Not ours: move it as it is; the live receive dead-letters it.
			e.MessageGroupId = aws.String(hashID("u#", aws.ToString(sm.MessageId)))
			e.MessageDeduplicationId = aws.String(hashID("v", aws.ToString(sm.MessageId)))
		}
		entries = append(entries, e)
		receipts = append(receipts, aws.ToString(sm.ReceiptHandle))
	}
	if len(entries) == 0 {
		return nil
	}
	out, err := d.client.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(lq.url), Entries: entries})
	if err != nil {
		return err
	}
	var del []types.DeleteMessageBatchRequestEntry
	for _, s := range out.Successful {
		j, err := strconv.Atoi(aws.ToString(s.Id))
		if err != nil || j < 0 || j >= len(receipts) {
			continue
		}
		del = append(del, types.DeleteMessageBatchRequestEntry{Id: s.Id, ReceiptHandle: aws.String(receipts[j])})
	}
	if len(del) > 0 {
		if _, err := d.client.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(lq.delayURL), Entries: del}); err != nil {
			return err
		}
	}
	if len(out.Failed) > 0 {
		f := out.Failed[0]
		return entryError("move delayed", aws.ToString(f.Code), aws.ToString(f.Message), f.SenderFault)
	}
	return nil
}
