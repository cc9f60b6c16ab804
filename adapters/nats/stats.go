package nats

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

// Stats reads the lane's consumer and per-subject stream counts:
//
//   - Ready: messages not yet delivered (the consumer's NumPending);
//   - InFlight: delivered and not acked (NumAckPending), less the messages
//     this process nacked with a delay that has not passed;
//   - Delayed: messages on the lane's delayed subject (run-at in the
//     future) plus this process's pending nack delays;
//   - DeadLettered: messages on the lane's dead-letter subject;
//   - OldestReady: the age of the first message on the lane's subject past
//     the consumer's delivered sequence (one more request).
//
// Messages whose lease expired and that wait to be redelivered still count
// as in flight: JetStream reports them as ack-pending.
func (d *Driver) Stats(ctx context.Context, lane string) (broker.Stats, error) {
	if err := d.checkOpen("stats"); err != nil {
		return broker.Stats{}, err
	}
	lc, err := d.consumer(ctx, lane, false)
	if err != nil {
		return broker.Stats{}, err
	}
	st := broker.Stats{Lane: lane}
	ci, err := lc.c.Info(ctx)
	if err != nil {
		return st, classify("stats", err)
	}
	delayedSubj := d.names.delayedSubj(lane)
	delayed, err := subjectCount(ctx, d.liveStream, delayedSubj)
	if err != nil {
		return st, err
	}
	dead, err := subjectCount(ctx, d.dlqStream, d.names.dlqSubj(lane))
	if err != nil {
		return st, err
	}
	nak := min(d.nakDelayed(lane), int64(ci.NumAckPending))
	st.Ready = int64(ci.NumPending)
	st.InFlight = int64(ci.NumAckPending) - nak
	st.Delayed = delayed + nak
	st.DeadLettered = dead
	if st.Ready > 0 {
		// The oldest ready message is the first one on the lane's subject
		// past the consumer's delivered sequence; it became ready when it
		// was stored (delayed messages are stored when due).
		raw, err := d.liveStream.GetMsg(ctx, ci.Delivered.Stream+1, jetstream.WithGetMsgSubject(d.names.liveSubj(lane)))
		if err == nil && !raw.Time.IsZero() {
			st.OldestReady = max(time.Since(raw.Time), time.Nanosecond)
		}
	}
	return st, nil
}

// subjectCount is the number of messages stored on one subject of s.
func subjectCount(ctx context.Context, s jetstream.Stream, subj string) (int64, error) {
	si, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, classify("stats", err)
	}
	return int64(si.State.Subjects[subj]), nil
}
