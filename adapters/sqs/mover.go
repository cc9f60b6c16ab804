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
	moverLease    = 10 * time.Second // visibility of messages being moved
	moverPause    = time.Second      // first pause after a failed poll or move
	moverMaxPause = time.Minute      // longest pause, doubling from moverPause
	moverLogEvery = time.Minute      // at most one warning this often while failing
)

// startMover starts lq's mover once per driver. A failing mover backs off
// (moverPause doubling to moverMaxPause) and says so in Config.Logger.
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
		var bo moverBackoff
		for d.bg.Err() == nil {
			err := d.moveDue(d.bg, lq)
			if err != nil && d.bg.Err() != nil {
				return // closed during the poll
			}
			now := time.Now()
			if err == nil {
				if n, logged := bo.succeeded(); logged {
					d.log.Info("switchyard: sqs: the delay queue mover of a FIFO lane works again",
						"lane", lane, "failures", n)
				}
				continue
			}
			d.forget(lane, err)
			wait, n, logIt := bo.failed(now)
			if logIt {
				d.log.Warn("switchyard: sqs: the delay queue mover of a FIFO lane fails; delayed messages wait in the delay queue until it recovers",
					"lane", lane, "failures", n, "retry_in", wait, "error", err)
			}
			pause(d.bg, wait)
		}
	}()
}

// moverBackoff paces a failing mover and rate-limits its warnings.
type moverBackoff struct {
	fails   int // consecutive failures
	pause   time.Duration
	lastLog time.Time // zero: nothing logged for this run of failures
}

// failed records a failure at now and returns the pause before the next
// try, the number of consecutive failures, and whether to log this one
// (the first of a run, then at most one per moverLogEvery).
func (b *moverBackoff) failed(now time.Time) (wait time.Duration, fails int, log bool) {
	b.fails++
	if b.pause == 0 {
		b.pause = moverPause
	} else {
		b.pause = min(2*b.pause, moverMaxPause)
	}
	if b.lastLog.IsZero() || now.Sub(b.lastLog) >= moverLogEvery {
		b.lastLog, log = now, true
	}
	return b.pause, b.fails, log
}

// succeeded ends a run of failures; logged says whether any of it was
// logged (so that the recovery is too), fails how long it was.
func (b *moverBackoff) succeeded() (fails int, logged bool) {
	fails, logged = b.fails, !b.lastLog.IsZero()
	*b = moverBackoff{}
	return fails, logged
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
