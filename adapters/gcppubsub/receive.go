package gcppubsub

import (
	"context"
	"fmt"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-dev/switchyard/broker"
)

// shortPollGap spaces the immediate pulls that fill a sub-second rest of a
// receive's wait.
const shortPollGap = 100 * time.Millisecond

// Receive pulls the lane's subscription (or its dead-letter subscription)
// with the synchronous Pull RPC, up to req.Max messages, and sets their
// ack deadline to the lease with ModifyAckDeadline (whole seconds, 1–600).
//
// A wait of a second or more is a pull that Pub/Sub holds open until a
// message arrives, with the rest of the wait as its deadline; a
// sub-second rest is spent in immediate pulls 100 ms apart, so that a
// pull never outlasts the caller's wait by much.
//
// On live subscriptions it also dead-letters undecodable data with
// ReasonUndecodable, and, with native ordering, gives back all but the
// first message of an ordering key that one response holds twice.
func (d *Driver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	lr, err := d.lane(ctx, "receive", req.Lane)
	if err != nil {
		return nil, err
	}
	sub := lr.names.liveSub
	if req.DeadLetters {
		sub = lr.names.deadSub
	} else {
		d.startMover(req.Lane, lr)
	}
	want := int32(min(max(req.Max, 1), maxPullBatch))
	lease := seconds(req.Lease, 1, int32(maxAckDeadline/time.Second))
	deadline := time.Now().Add(req.Wait)
	for {
		left := time.Until(deadline)
		long := left >= time.Second
		sent := time.Now()
		resp, err := d.pull(ctx, sub, want, long, left)
		if ctx.Err() != nil {
			return nil, broker.Wrap("receive", broker.Transient, ctx.Err())
		}
		if err != nil {
			if !long || status.Code(err) != codes.DeadlineExceeded && !broker.IsContext(err) {
				d.forget(req.Lane, err)
				return nil, classify("receive", err)
			}
			resp = &pb.PullResponse{} // the held-open pull ran to the end of the wait
		}
		if rms := resp.GetReceivedMessages(); len(rms) > 0 {
			out, err := d.deliveries(ctx, req, lr, sub, rms, lease, sent)
			if len(out) > 0 || err != nil {
				return out, err
			}
		}
		left = time.Until(deadline)
		if req.Wait <= 0 || left <= 0 {
			return nil, nil
		}
		if left < time.Second {
			t := time.NewTimer(min(left, shortPollGap))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, broker.Wrap("receive", broker.Transient, ctx.Err())
			case <-t.C:
			}
		}
	}
}

// pullTimeout bounds an immediate pull.
const pullTimeout = 10 * time.Second

// pull runs one Pull RPC (held open for wait when long). The RPC does not
// end with the caller's context: a caller that gives up gets its context's
// error at once, while the pull finishes in the background and gives back
// what it took (ModifyAckDeadline 0), so that nothing sits out a lease
// nobody holds. Close ends it (the clients' calls then fail at once).
func (d *Driver) pull(ctx context.Context, sub string, want int32, long bool, wait time.Duration) (*pb.PullResponse, error) {
	type result struct {
		resp *pb.PullResponse
		err  error
	}
	if !long {
		wait = pullTimeout
	}
	pctx, cancel := context.WithTimeout(d.bg, wait)
	ch := make(chan result, 1)
	go func() {
		resp, err := d.subs.Pull(pctx, &pb.PullRequest{Subscription: sub, MaxMessages: want, ReturnImmediately: !long})
		ch <- result{resp, err}
	}()
	select {
	case r := <-ch:
		cancel()
		return r.resp, r.err
	case <-ctx.Done():
	}
	go func() {
		defer cancel()
		r := <-ch
		var ids []string
		for _, rm := range r.resp.GetReceivedMessages() {
			ids = append(ids, rm.GetAckId())
		}
		if len(ids) > 0 {
			gctx, gcancel := context.WithTimeout(context.Background(), pullTimeout)
			_ = d.modAck(gctx, sub, ids, 0)
			gcancel()
		}
	}()
	return nil, ctx.Err()
}

// deliveries sets the leases of pulled messages and turns them into
// deliveries.
func (d *Driver) deliveries(ctx context.Context, req broker.ReceiveRequest, lr *laneRes, sub string, rms []*pb.ReceivedMessage, lease int32, pulled time.Time) ([]*broker.Delivery, error) {
	leaseEnd := pulled.Add(subAckDeadline * time.Second)
	if lease != subAckDeadline {
		ids := make([]string, len(rms))
		for i, rm := range rms {
			ids[i] = rm.GetAckId()
		}
		sent := time.Now()
		if err := d.modAck(ctx, sub, ids, lease); err != nil {
			// The messages keep the subscription's deadline and come back
			// after it.
			return nil, classify("receive", err)
		}
		leaseEnd = sent.Add(time.Duration(lease) * time.Second)
	}
	if req.DeadLetters {
		out := make([]*broker.Delivery, 0, len(rms))
		for _, rm := range rms {
			out = append(out, d.deadDelivery(req.Lane, sub, rm, leaseEnd))
		}
		return out, nil
	}
	var (
		out     []*broker.Delivery
		giveUp  []string
		firstEr error
		keys    = map[string]bool{}
	)
	for _, rm := range rms {
		h := &handle{lane: req.Lane, sub: sub, ackID: rm.GetAckId(), raw: rm.GetMessage().GetData()}
		m, err := decodeLive(h.raw)
		if err == nil && m.Lane != req.Lane {
			err = fmt.Errorf("%w: message of lane %q on lane %q's subscription", broker.ErrUndecodable, m.Lane, req.Lane)
		}
		if err != nil {
			dl := &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: err.Error(), At: time.Now().UTC()}
			if derr := d.deadLetter(ctx, lr, h, h.raw, dl); derr != nil {
				firstEr = cmpErr(firstEr, derr)
			}
			continue
		}
		if d.cfg.Ordering && m.OrderingKey != "" {
			if keys[m.OrderingKey] {
				giveUp = append(giveUp, h.ackID)
				continue
			}
			keys[m.OrderingKey] = true
		}
		attempt := int(rm.GetDeliveryAttempt())
		out = append(out, &broker.Delivery{Message: *m, Attempt: max(attempt, 1), LeaseDeadline: leaseEnd, Handle: h})
	}
	if len(giveUp) > 0 {
		// Best effort: if it fails they come back after their lease.
		_ = d.modAck(context.WithoutCancel(ctx), sub, giveUp, 0)
	}
	if len(out) == 0 && firstEr != nil {
		return nil, firstEr
	}
	return out, nil
}

// deadDelivery turns a message pulled from a dead-letter subscription into
// a delivery. Messages without the framework's record were moved by
// Pub/Sub's dead-letter policy (ReasonDeliveryLimit).
func (d *Driver) deadDelivery(lane, sub string, rm *pb.ReceivedMessage, leaseEnd time.Time) *broker.Delivery {
	pm := rm.GetMessage()
	h := &handle{lane: lane, sub: sub, ackID: rm.GetAckId(), dead: true, raw: pm.GetData()}
	dv := &broker.Delivery{Attempt: 1, LeaseDeadline: leaseEnd, Handle: h}
	var dl *broker.DeadLetter
	if pm.GetAttributes()[attrDeadLetter] == "1" {
		if rec, orig, err := unframeDead(pm.GetData()); err == nil {
			dl, h.raw = rec, orig
		}
	}
	m, decErr := decodeLive(h.raw)
	if decErr == nil {
		dv.Message = *m
	} else {
		dv.Message = broker.Message{ID: "pubsub-" + pm.GetMessageId(), Lane: lane, Body: h.raw}
	}
	switch {
	case dl != nil:
	case decErr != nil:
		dl = &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: decErr.Error()}
	default:
		dl = &broker.DeadLetter{Reason: broker.ReasonDeliveryLimit,
			Error: fmt.Sprintf("moved to the dead-letter topic by the Pub/Sub dead-letter policy (max_delivery_attempts %d)", d.cfg.MaxDeliveries)}
		if pm.GetPublishTime() != nil {
			dl.At = pm.GetPublishTime().AsTime()
		}
	}
	dv.DeadLetter = dl
	if n := len(dl.Attempts); n > 0 && dl.Attempts[n-1].Attempt > 0 {
		dv.Attempt = dl.Attempts[n-1].Attempt
	}
	return dv
}

// modAck sets the ack deadline of ackIDs on sub to secs (0: give them back
// at once).
func (d *Driver) modAck(ctx context.Context, sub string, ackIDs []string, secs int32) error {
	for len(ackIDs) > 0 {
		n := min(len(ackIDs), 1000)
		if err := d.subs.ModifyAckDeadline(ctx, &pb.ModifyAckDeadlineRequest{Subscription: sub, AckIds: ackIDs[:n], AckDeadlineSeconds: secs}); err != nil {
			return err
		}
		ackIDs = ackIDs[n:]
	}
	return nil
}
