package gcppubsub

import (
	"context"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/switchyard-dev/switchyard/broker"
)

// Ack acknowledges the deliveries with the Acknowledge RPC, grouped by
// subscription. Pub/Sub ignores an ack ID whose lease has passed to
// another consumer (the other delivery is never removed); on a
// subscription with exactly-once delivery it says so, and the error is
// ErrLeaseLost.
func (d *Driver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	if d.closed.Load() {
		return broker.ClosedError("ack")
	}
	hs, err := handles("ack", ds)
	if err != nil {
		return err
	}
	var first error
	for sub, ids := range bySub(hs) {
		for len(ids) > 0 {
			n := min(len(ids), 1000)
			err := d.subs.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: sub, AckIds: ids[:n]})
			first = cmpErr(first, d.settleErr("ack", hs[0].lane, err))
			ids = ids[n:]
		}
	}
	return first
}

// settleErr classifies an Acknowledge or ModifyAckDeadline error; on an
// exactly-once subscription, ack IDs reported as permanently failed are
// ErrLeaseLost.
func (d *Driver) settleErr(op, lane string, err error) error {
	if err == nil {
		return nil
	}
	if failed, ok := ackFailures(err); ok {
		for id, permanent := range failed {
			if permanent {
				return broker.LeaseLostError(op, "ack id "+id)
			}
		}
		return broker.Wrap(op, broker.Transient, err)
	}
	d.forget(lane, err)
	return classify(op, err)
}

func bySub(hs []*handle) map[string][]string {
	out := map[string][]string{}
	for _, h := range hs {
		out[h.sub] = append(out[h.sub], h.ackID)
	}
	return out
}

// Nack sets the message's ack deadline to delay (rounded up to whole
// seconds, at most 600) with ModifyAckDeadline, so that Pub/Sub delivers
// it again after the delay with the next delivery attempt.
func (d *Driver) Nack(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	if d.closed.Load() {
		return broker.ClosedError("nack")
	}
	h, err := handleOf("nack", dv)
	if err != nil {
		return err
	}
	secs := seconds(delay, 0, int32(maxAckDeadline/time.Second))
	return d.settleErr("nack", h.lane, d.modAck(ctx, h.sub, []string{h.ackID}, secs))
}

// Extend sets the ack deadlines of the deliveries to lease from now with
// ModifyAckDeadline. A delivery whose lease already ended gets
// ErrLeaseLost without a call: another consumer may hold it by now.
func (d *Driver) Extend(ctx context.Context, ds []*broker.Delivery, lease time.Duration) error {
	if d.closed.Load() {
		return broker.ClosedError("extend")
	}
	hs, err := handles("extend", ds)
	if err != nil {
		return err
	}
	var first error
	now := time.Now()
	secs := seconds(lease, 1, int32(maxAckDeadline/time.Second))
	bySubLive := map[string][]int{}
	for i, dv := range ds {
		if !dv.LeaseDeadline.IsZero() && !now.Before(dv.LeaseDeadline) {
			first = cmpErr(first, broker.LeaseLostError("extend", dv.ID))
			continue
		}
		bySubLive[hs[i].sub] = append(bySubLive[hs[i].sub], i)
	}
	for sub, idx := range bySubLive {
		ids := make([]string, len(idx))
		for j, i := range idx {
			ids[j] = hs[i].ackID
		}
		sent := time.Now()
		if err := d.modAck(ctx, sub, ids, secs); err != nil {
			first = cmpErr(first, d.settleErr("extend", hs[idx[0]].lane, err))
			continue
		}
		for _, i := range idx {
			ds[i].LeaseDeadline = sent.Add(time.Duration(secs) * time.Second)
		}
	}
	return first
}

// DeadLetter publishes the message to the lane's dead-letter topic with
// the record (see codec.go), then acknowledges it on the live
// subscription: a crash in between leaves it in both, never in neither.
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
	lr, err := d.lane(ctx, "dead-letter", h.lane)
	if err != nil {
		return err
	}
	data := h.raw
	if !h.dead || decodeOK(h.raw) {
		data = broker.EncodeEnvelope(&dv.Message)
	}
	return d.deadLetter(ctx, lr, h, data, dl)
}

func decodeOK(b []byte) bool {
	_, err := decodeLive(b)
	return err == nil
}

// deadLetter publishes data with dl to the dead-letter topic and acks h.
func (d *Driver) deadLetter(ctx context.Context, lr *laneRes, h *handle, data []byte, dl *broker.DeadLetter) error {
	rec, err := encodeRecord(dl, len(data), d.cfg.MaxMessageSize)
	if err != nil {
		return err
	}
	pm := &pb.PubsubMessage{Data: frameDead(rec, data), Attributes: map[string]string{attrDeadLetter: "1"}}
	if _, err := d.topics.Publish(ctx, &pb.PublishRequest{Topic: lr.names.deadTopic, Messages: []*pb.PubsubMessage{pm}}); err != nil {
		d.forget(h.lane, err)
		return classify("dead-letter", err)
	}
	err = d.subs.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: h.sub, AckIds: []string{h.ackID}})
	return d.settleErr("dead-letter", h.lane, err)
}

// Replay publishes a dead letter back to its live topic as a new Pub/Sub
// message (so its delivery attempts start again at 1), then acknowledges
// it on the dead-letter subscription.
func (d *Driver) Replay(ctx context.Context, dv *broker.Delivery) error {
	if d.closed.Load() {
		return broker.ClosedError("replay")
	}
	h, err := handleOf("replay", dv)
	if err != nil {
		return err
	}
	if !h.dead {
		return broker.Invalidf("replay: delivery %s is not from a dead-letter subscription", dv.ID)
	}
	lr, err := d.lane(ctx, "replay", h.lane)
	if err != nil {
		return err
	}
	data := h.raw
	pm := &pb.PubsubMessage{Data: data}
	if decodeOK(h.raw) {
		pm.Data = broker.EncodeEnvelope(&dv.Message)
		if d.cfg.Ordering {
			pm.OrderingKey = dv.OrderingKey
		}
	}
	if len(pm.Data) == 0 {
		pm.Data = []byte{0} // Pub/Sub refuses an empty message; it stays undecodable
	}
	if _, err := d.topics.Publish(ctx, &pb.PublishRequest{Topic: lr.names.liveTopic, Messages: []*pb.PubsubMessage{pm}}); err != nil {
		d.forget(h.lane, err)
		return classify("replay", err)
	}
	err = d.subs.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: h.sub, AckIds: []string{h.ackID}})
	return d.settleErr("replay", h.lane, err)
}
