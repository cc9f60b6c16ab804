package nats

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

// msgID derives the Nats-Msg-Id of a message with an idempotency key, so
// that the same (lane, tenant, key) is one message within the stream's
// duplicate window.
func msgID(lane, tenant, key string) string {
	h := sha256.New()
	for _, s := range []string{lane, tenant, key} {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	return "idem-" + hex.EncodeToString(h.Sum(nil)[:20])
}

// Publish sends the whole batch, then waits for every acknowledgement
// (puback.go). A message whose acknowledgement does not arrive within
// publish_timeout (or before ctx or the driver ends) gets an error matching
// broker.ErrUnknownOutcome: it may or may not be stored.
func (d *Driver) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	if err := d.checkOpen("publish"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, classify("publish", err)
	}
	now := time.Now()
	res := make([]broker.PublishResult, len(msgs))
	replies := make(chan pubReply, len(msgs))
	toks := make([]uint64, 0, len(msgs))
	var lastLane, lastSubj string // batches are usually one lane
	for i, m := range msgs {
		res[i].ID = m.ID
		if d.cfg.maxDeliver > 0 && m.MaxAttempts > d.cfg.maxDeliver {
			// The consumer's MaxDeliver counts every delivery, nacks
			// included: it would cut the message's attempts short.
			res[i].Err = broker.Invalidf("nats: publish: max attempts %d is above the consumers' max_deliver %d, which would dead-letter the message early: "+
				"lower MaxAttempts, or open the driver with max_deliver=-1 (unlimited; Switchyard enforces MaxAttempts) or at least %d", m.MaxAttempts, d.cfg.maxDeliver, m.MaxAttempts)
			continue
		}
		if m.Lane != lastLane || lastSubj == "" {
			lastLane, lastSubj = m.Lane, d.names.liveSubj(m.Lane)
		}
		nm := &natsgo.Msg{Subject: lastSubj, Data: broker.EncodeEnvelope(m)}
		if m.IdempotencyKey != "" || m.RunAt.After(now) {
			nm.Header = natsgo.Header{}
		}
		if m.IdempotencyKey != "" {
			nm.Header.Set(jetstream.MsgIDHeader, msgID(m.Lane, m.Tenant, m.IdempotencyKey))
		}
		if m.RunAt.After(now) {
			nm.Subject = d.names.delayedSubj(m.Lane)
			nm.Header.Set(headerRunAt, strconv.FormatInt(broker.UnixNano(m.RunAt), 10)) // clamped, never wrapped
		}
		tok, err := d.acks.send(nm, i, replies)
		if err != nil {
			// Not sent: a definite failure.
			res[i].Err = classify("publish", err)
			continue
		}
		toks = append(toks, tok)
	}
	if len(toks) == 0 {
		return res, nil
	}
	timeout := time.NewTimer(d.cfg.publishTimeout)
	defer timeout.Stop()
	waiting := make([]bool, len(msgs))
	for i := range msgs {
		waiting[i] = res[i].Err == nil
	}
	for left := len(toks); left > 0; left-- {
		var stop error
		select {
		case r := <-replies:
			waiting[r.i] = false
			if r.err != nil {
				res[r.i].Err = classifyPublishAck("publish", r.err)
			} else if r.ack.Duplicate {
				res[r.i].Duplicate = true
				res[r.i].ID = d.idAt(ctx, r.ack.Sequence)
			}
			continue
		case <-timeout.C:
			stop = jetstream.ErrAsyncPublishTimeout
		case <-ctx.Done():
			stop = ctx.Err()
		case <-d.closing:
			stop = broker.ClosedError("publish")
		}
		// Stop waiting: whatever is not acknowledged may or may not be stored.
		d.acks.forget(toks...)
		for i, w := range waiting {
			if w {
				res[i].Err = broker.Wrap("publish", broker.UnknownOutcome, stop)
			}
		}
		break
	}
	return res, nil
}

// idAt returns the ID of the message stored at seq in the live stream, or
// "" when it is gone (consumed, or moved from the delayed subject).
func (d *Driver) idAt(ctx context.Context, seq uint64) string {
	raw, err := d.liveStream.GetMsg(ctx, seq)
	if err != nil {
		return ""
	}
	m, err := broker.DecodeEnvelope(raw.Data)
	if err != nil {
		return ""
	}
	return m.ID
}

// publishSync publishes one message and waits for its acknowledgement.
func (d *Driver) publishSync(ctx context.Context, op string, m *natsgo.Msg) (*jetstream.PubAck, error) {
	ack, err := d.js.PublishMsg(ctx, m, jetstream.WithRetryAttempts(0))
	if err != nil {
		if errors.Is(err, natsgo.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
			return nil, classify(op, err)
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			return nil, classify(op, err)
		}
		if errors.Is(err, natsgo.ErrTimeout) || broker.IsContext(err) {
			return nil, broker.Wrap(op, broker.UnknownOutcome, err)
		}
		return nil, classify(op, err)
	}
	return ack, nil
}
