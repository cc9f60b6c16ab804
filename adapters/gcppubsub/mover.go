package gcppubsub

import (
	"context"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// Pub/Sub has no delayed delivery. A message with a future RunAt goes to
// the lane's delay topic, and every consumer of the lane runs a mover that
// pulls the delay subscription: a message not yet due gets its ack
// deadline set to the time left (at most 600 s, again and again), a due
// one is published to the live topic and then acknowledged. A crash
// between the two leaves a second copy with the same message ID, which
// the ledger's effects-once rule covers. Live messages are therefore never
// early, and their delivery attempts count real deliveries only.

const (
	moverBatch = 100
	moverPause = time.Second // pause after a failed pull or move
	moverWait  = 5 * time.Second
)

// startMover starts lr's mover once per driver.
func (d *Driver) startMover(lane string, lr *laneRes) {
	lr.mu.Lock()
	if lr.moving || d.closed.Load() {
		lr.mu.Unlock()
		return
	}
	lr.moving = true
	lr.mu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for d.bg.Err() == nil {
			if err := d.moveDue(d.bg, lr); err != nil && d.bg.Err() == nil {
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

// moveDue pulls the delay subscription once and moves what is due.
func (d *Driver) moveDue(ctx context.Context, lr *laneRes) error {
	n := lr.names
	pctx, cancel := context.WithTimeout(ctx, moverWait)
	resp, err := d.subs.Pull(pctx, &pb.PullRequest{Subscription: n.delaySub, MaxMessages: moverBatch})
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		if pctx.Err() != nil {
			return nil // the held-open pull found nothing
		}
		return err
	}
	rms := resp.GetReceivedMessages()
	if len(rms) == 0 {
		return nil
	}
	// The move must finish even while Close cancels the pull.
	ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	now := time.Now()
	var due []*pb.PubsubMessage
	var dueIDs []string
	later := map[int32][]string{}
	for _, rm := range rms {
		pm := rm.GetMessage()
		if m, err := decodeLive(pm.GetData()); err == nil && m.RunAt.After(now) {
			s := seconds(m.RunAt.Sub(now), 1, int32(maxAckDeadline/time.Second))
			later[s] = append(later[s], rm.GetAckId())
			continue
		} else if err == nil && d.cfg.Ordering {
			pm = &pb.PubsubMessage{Data: pm.GetData(), OrderingKey: m.OrderingKey}
		} else {
			// Due, or not ours: move it as it is (the live receive
			// dead-letters what does not decode).
			pm = &pb.PubsubMessage{Data: pm.GetData()}
		}
		due = append(due, pm)
		dueIDs = append(dueIDs, rm.GetAckId())
	}
	for s, ids := range later {
		if err := d.modAck(ctx, n.delaySub, ids, s); err != nil {
			return err
		}
	}
	if len(due) == 0 {
		return nil
	}
	if _, err := d.topics.Publish(ctx, &pb.PublishRequest{Topic: n.liveTopic, Messages: due}); err != nil {
		return err
	}
	return d.subs.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: n.delaySub, AckIds: dueIDs})
}
