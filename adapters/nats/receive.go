package nats

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

// handle is the driver's state of one delivery (Delivery.Handle).
type handle struct {
	d   *Driver
	lc  *laneConsumer
	msg jetstream.Msg
	seq uint64 // stream sequence

	mu       sync.Mutex
	sent     time.Time // the server's AckWait timer started no earlier than this
	target   time.Time // the lease end the caller asked for
	deadline time.Time // the lease end reported: max(sent+AckWait, target)
	settled  bool      // acked, nacked or dead-lettered by this handle
	lost     bool      // the keeper missed the server's deadline
}

// Receive leases up to req.Max messages with Fetch requests whose expiry is
// at most pull_expiry, so a pull lost by the server (a restart, a
// leadership change) costs at most one expiry. It first takes what is ready
// without waiting; when nothing is, it waits for one message and then tops
// the batch up with what has arrived meanwhile.
//
// Each delivery's lease is req.Lease, or the consumer's AckWait if that is
// longer (see lease.go); LeaseDeadline reports it.
func (d *Driver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	if err := d.checkOpen("receive"); err != nil {
		return nil, err
	}
	lc, err := d.consumer(ctx, req.Lane, req.DeadLetters)
	if err != nil {
		return nil, err
	}
	max := req.Max
	if max <= 0 {
		max = 1
	}
	if max > d.cfg.maxBatch {
		max = d.cfg.maxBatch
	}
	deadline := time.Now().Add(req.Wait)
	for {
		sent := time.Now()
		msgs, err := d.fetch(ctx, lc, max, 0)
		if err != nil {
			return nil, err
		}
		for len(msgs) == 0 && ctx.Err() == nil {
			if d.closed.Load() {
				return nil, broker.ClosedError("receive")
			}
			left := time.Until(deadline)
			if left < time.Millisecond {
				break
			}
			sent = time.Now()
			msgs, err = d.fetch(ctx, lc, 1, min(left, d.cfg.pullExpiry))
			if err != nil {
				return nil, err
			}
			if len(msgs) == 1 && max > 1 {
				more, err := d.fetch(ctx, lc, max-1, 0)
				if err == nil {
					msgs = append(msgs, more...)
				}
			}
		}
		if d.fetched != nil && len(msgs) > 0 {
			d.fetched()
		}
		if err := ctx.Err(); err != nil {
			// Cancelled: a caller that gave up must not be handed messages
			// it may drop (they would be held until their AckWait ends).
			// Give back what was fetched, at once.
			giveBack(msgs)
			return nil, classify("receive", err)
		}
		out := make([]*broker.Delivery, 0, len(msgs))
		for _, m := range msgs {
			if dv := d.toDelivery(ctx, lc, m, sent, req.Lease); dv != nil {
				out = append(out, dv)
			}
		}
		// Messages dead-lettered as undecodable are not returned; keep
		// waiting for real ones while the caller's wait lasts.
		if len(out) > 0 || len(msgs) == 0 || !time.Now().Before(deadline) {
			return out, nil
		}
	}
}

// pullGrace is how long after a waiting pull request's expiry fetch still
// waits for the server's answer (its messages or its 408 Request Timeout)
// before giving the request up. nats.go itself waits the expiry plus one
// second; the server does not always answer an expired request (seen on
// nats-server 2.9.10: one Fetch(1) with a 50 ms expiry in a few thousand,
// at 200 messages/s, got neither a message nor a 408 and returned after
// 1.05 s while messages were waiting), and every task published meanwhile
// waited that second. A quarter of the wait, at least 250 ms and at most
// the client's own second.
func pullGrace(wait time.Duration) time.Duration {
	return min(max(wait/4, 250*time.Millisecond), time.Second)
}

// fetch pulls up to n messages: without waiting when wait is 0, else
// waiting up to wait for them. If ctx ends first, or the server has not
// answered pullGrace after the request's expiry, it returns what it has;
// messages that arrive for the abandoned request are handed back with a
// Nak.
func (d *Driver) fetch(ctx context.Context, lc *laneConsumer, n int, wait time.Duration) ([]jetstream.Msg, error) {
	var (
		b      jetstream.MessageBatch
		err    error
		giveUp <-chan time.Time
	)
	if wait <= 0 {
		b, err = lc.c.FetchNoWait(n)
	} else {
		b, err = lc.c.Fetch(n, jetstream.FetchMaxWait(wait))
		t := time.NewTimer(wait + pullGrace(wait))
		defer t.Stop()
		giveUp = t.C
	}
	if err != nil {
		return nil, classify("receive", err)
	}
	var out []jetstream.Msg
	ch := b.Messages()
	for {
		select {
		case <-giveUp:
			go nakRest(ch)
			return out, nil
		case m, ok := <-ch:
			if !ok {
				if err := b.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, natsgo.ErrTimeout) && len(out) == 0 {
					return nil, classify("receive", err)
				}
				return out, nil
			}
			out = append(out, m)
		case <-ctx.Done():
			go nakRest(ch)
			return out, nil
		case <-d.closing:
			go nakRest(ch)
			return out, nil
		}
	}
}

// giveBack hands fetched messages back for immediate redelivery. JetStream
// counts the delivery all the same (the next one has the next attempt
// number); there is no way to take a delivery back unspent.
func giveBack(msgs []jetstream.Msg) {
	for _, m := range msgs {
		_ = m.Nak()
	}
}

// nakRest hands back messages that arrive for an abandoned pull.
func nakRest(ch <-chan jetstream.Msg) {
	for m := range ch {
		_ = m.Nak()
	}
}

// toDelivery turns a fetched message into a delivery. Live messages that
// are not envelopes are dead-lettered with broker.ReasonUndecodable and
// yield nil.
func (d *Driver) toDelivery(ctx context.Context, lc *laneConsumer, m jetstream.Msg, sent time.Time, lease time.Duration) *broker.Delivery {
	md, err := m.Metadata()
	if err != nil {
		// Not a JetStream message: nothing to ack.
		return nil
	}
	h := &handle{d: d, lc: lc, msg: m, seq: md.Sequence.Stream}
	if !lc.dlq {
		d.forgetNak(lc.lane, h.seq)
		env, err := broker.DecodeEnvelope(m.Data())
		if err != nil {
			h.deadline = sent.Add(lc.wait)
			d.deadLetterUndecodable(ctx, h, err)
			return nil
		}
		env.Lane = lc.lane
		h.mu.Lock()
		deadline := h.setLease(sent, sent.Add(lease))
		h.mu.Unlock()
		return &broker.Delivery{Message: *env, Attempt: int(md.NumDelivered), LeaseDeadline: deadline, Handle: h}
	}
	h.mu.Lock()
	deadline := h.setLease(sent, sent.Add(lease))
	h.mu.Unlock()
	dv := d.deadDelivery(lc.lane, m.Data(), m.Headers(), h.seq, md.Timestamp)
	dv.LeaseDeadline, dv.Handle = deadline, h
	return dv
}

// deadDelivery decodes a message of the dead-letter stream (its data,
// headers, stream sequence and time) into a delivery without a handle.
func (d *Driver) deadDelivery(lane string, data []byte, hdr natsgo.Header, seq uint64, at time.Time) *broker.Delivery {
	dl, err := broker.DecodeDeadLetter([]byte(hdr.Get(headerDeadLetter)))
	if err != nil || dl.Reason == "" {
		dl = &broker.DeadLetter{Reason: broker.ReasonDeliveryLimit, Error: "dead-letter record missing or unreadable", At: at}
	}
	env, err := broker.DecodeEnvelope(data)
	if err != nil {
		env = &broker.Message{ID: hdr.Get(headerID), Body: append([]byte(nil), data...)}
		if env.ID == "" {
			env.ID = "nats-" + d.names.dlq + "-" + strconv.FormatUint(seq, 10)
		}
	}
	env.Lane = lane
	attempt, aerr := strconv.Atoi(hdr.Get(headerAttempt))
	if aerr != nil || attempt < 0 {
		attempt = 0 // absent, or set by another publisher: unknown
	}
	return &broker.Delivery{Message: *env, Attempt: attempt, DeadLetter: dl}
}

// deadLetterUndecodable moves a live message that is not an envelope to the
// dead-letter stream and acks it. On failure it is left to come back after
// its AckWait and be tried again.
func (d *Driver) deadLetterUndecodable(ctx context.Context, h *handle, cause error) {
	dl := &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: cause.Error(), At: time.Now().UTC()}
	md, _ := h.msg.Metadata()
	if md != nil {
		dl.Attempts = []broker.AttemptRecord{{Attempt: int(md.NumDelivered), Start: time.Now().UTC(), Class: "permanent", Error: cause.Error()}}
	}
	id := "nats-" + d.names.live + "-" + strconv.FormatUint(h.seq, 10)
	if err := d.moveToDLQ(ctx, h.lc.lane, h.seq, h.msg.Data(), id, 1, dl); err != nil {
		d.log.Warn("nats: dead-lettering an undecodable message failed; it comes back after its lease", "lane", h.lc.lane, "seq", h.seq, "err", err)
		return
	}
	if err := h.msg.DoubleAck(ctx); err != nil {
		d.log.Warn("nats: acking an undecodable message after dead-lettering failed", "lane", h.lc.lane, "seq", h.seq, "err", err)
	}
}

// moveToDLQ publishes a dead letter for the live message at seq. The
// Nats-Msg-Id makes a retried move (a crash between publish and ack) one
// dead letter within the duplicate window.
func (d *Driver) moveToDLQ(ctx context.Context, lane string, seq uint64, data []byte, id string, attempt int, dl *broker.DeadLetter) error {
	rec, err := encodeDeadLetter(dl)
	if err != nil {
		return broker.Wrap("dead-letter", broker.Permanent, err)
	}
	m := &natsgo.Msg{Subject: d.names.dlqSubj(lane), Data: data, Header: natsgo.Header{}}
	m.Header.Set(headerDeadLetter, string(rec))
	m.Header.Set(headerID, id)
	m.Header.Set(headerAttempt, strconv.Itoa(attempt))
	m.Header.Set(jetstream.MsgIDHeader, "dl-"+d.names.live+"-"+strconv.FormatUint(seq, 10))
	_, err = d.publishSync(ctx, "dead-letter", m)
	return err
}

// encodeDeadLetter encodes dl for a header, trimming the history and error
// texts if the record would be too large.
func encodeDeadLetter(dl *broker.DeadLetter) ([]byte, error) {
	b, err := broker.EncodeDeadLetter(dl)
	if err != nil || len(b) <= maxDeadLetterHeader {
		return b, err
	}
	c := *dl
	if len(c.Attempts) > 20 {
		c.Attempts = append(append([]broker.AttemptRecord{}, c.Attempts[:5]...), c.Attempts[len(c.Attempts)-15:]...)
	} else {
		c.Attempts = append([]broker.AttemptRecord{}, c.Attempts...)
	}
	for i := range c.Attempts {
		c.Attempts[i].Error = truncate(c.Attempts[i].Error, 512)
	}
	c.Error = truncate(c.Error, 4096)
	return broker.EncodeDeadLetter(&c)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…(truncated)"
}
