package gcppubsub

import (
	"context"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/switchyard-dev/switchyard/broker"
)

// maxRequestBytes bounds one Publish request's data (Pub/Sub allows 10 MB;
// pstest's gRPC server takes 4 MiB). A message larger than this travels
// alone.
const maxRequestBytes = 3 << 20

// Publish sends msgs with the Publish RPC, up to 1,000 messages (and about
// 3 MiB) per call, grouped by lane. A message whose RunAt is ahead goes to
// the lane's delay topic (see mover.go). Every failure is reported per
// message.
func (d *Driver) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	if d.closed.Load() {
		return nil, broker.ClosedError("publish")
	}
	res := make([]broker.PublishResult, len(msgs))
	type target struct{ lane, topic string }
	by := map[target][]int{}
	var order []target
	now := time.Now()
	lanes := map[string]*laneRes{}
	for i, m := range msgs {
		if m == nil {
			res[i].Err = broker.Invalidf("publish: nil message")
			continue
		}
		res[i].ID = m.ID
		if m.MaxAttempts > d.cfg.MaxDeliveries {
			// Every delivery counts toward the dead-letter policy, nacks
			// included: Pub/Sub would cut the message's attempts short.
			res[i].Err = broker.Invalidf("gcppubsub: publish: max attempts %d is above the subscriptions' max_deliveries %d (the dead-letter policy's max_delivery_attempts), "+
				"which would dead-letter the message early: lower MaxAttempts or open with max_deliveries up to %d", m.MaxAttempts, d.cfg.MaxDeliveries, maxDeliveries)
			continue
		}
		lr, ok := lanes[m.Lane]
		if !ok {
			var err error
			if lr, err = d.lane(ctx, "publish", m.Lane); err != nil {
				res[i].Err = err
				continue
			}
			lanes[m.Lane] = lr
		}
		tg := target{m.Lane, lr.names.liveTopic}
		if m.RunAt.After(now) {
			tg.topic = lr.names.delayTopic
		}
		if _, seen := by[tg]; !seen {
			order = append(order, tg)
		}
		by[tg] = append(by[tg], i)
	}
	for _, tg := range order {
		d.publishTopic(ctx, tg.lane, tg.topic, msgs, by[tg], res)
	}
	return res, nil
}

func (d *Driver) publishTopic(ctx context.Context, lane, topic string, msgs []*broker.Message, idx []int, res []broker.PublishResult) {
	var (
		batch []*pb.PubsubMessage
		which []int
		size  int
	)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		out, err := d.topics.Publish(ctx, &pb.PublishRequest{Topic: topic, Messages: batch})
		if err == nil && len(out.GetMessageIds()) != len(batch) {
			err = &broker.Error{Op: "publish", Class: broker.UnknownOutcome, Err: errShortPublish}
		}
		if err != nil {
			d.forget(lane, err)
			err = classify("publish", err)
			for _, i := range which {
				res[i].Err = err
			}
		}
		batch, which, size = batch[:0:0], which[:0:0], 0
	}
	for _, i := range idx {
		m := msgs[i]
		data := broker.EncodeEnvelope(m)
		if len(data)+len(m.OrderingKey) > d.cfg.MaxMessageSize-recordReserve {
			res[i].Err = &broker.Error{Op: "publish", Class: broker.Permanent, Kind: broker.ErrTooLarge,
				Err: &broker.TooLargeError{Size: m.Size(), Max: d.caps.MaxMessageSize}}
			continue
		}
		pm := &pb.PubsubMessage{Data: data}
		if d.cfg.Ordering {
			pm.OrderingKey = m.OrderingKey
		}
		if len(batch) == maxPublishBatch || (len(batch) > 0 && size+len(data) > maxRequestBytes) {
			flush()
		}
		batch = append(batch, pm)
		which = append(which, i)
		size += len(data)
	}
	flush()
}

type constError string

func (e constError) Error() string { return string(e) }

const errShortPublish = constError("gcppubsub: the publish response has fewer message IDs than the request had messages")
