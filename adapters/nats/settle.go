package nats

import (
	"context"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

// handleOf checks that dv was delivered by this driver.
func (d *Driver) handleOf(op string, dv *broker.Delivery) (*handle, error) {
	if dv == nil {
		return nil, broker.KindError(op, broker.Permanent, broker.ErrInvalid, "nil delivery")
	}
	h, ok := dv.Handle.(*handle)
	if !ok || h.d != d {
		return nil, broker.KindError(op, broker.Permanent, broker.ErrInvalid, "delivery %s was not received through this nats driver", dv.ID)
	}
	return h, nil
}

// claim checks that the handle still holds its lease and, when settle is
// true, marks it settled so that it is used once. After the deadline the
// server may have handed the message to another consumer, and an ack or nak
// sent now would act on that consumer's delivery: it is refused with
// ErrLeaseLost.
func (h *handle) claim(op, id string, settle bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.settled || h.lost || !time.Now().Before(h.deadline) {
		return broker.LeaseLostError(op, id)
	}
	if settle {
		h.settled = true
	}
	return nil
}

// Ack acknowledges the deliveries. Acks are sent without waiting for the
// server's confirmation (JetStream acks are idempotent and a lost one only
// means a redelivery). A delivery whose lease ended is not acked and yields
// ErrLeaseLost.
func (d *Driver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	if err := d.checkOpen("ack"); err != nil {
		return err
	}
	var first error
	for _, dv := range ds {
		h, err := d.handleOf("ack", dv)
		if err == nil {
			err = h.claim("ack", dv.ID, true)
		}
		if err == nil {
			if err = h.msg.Ack(); err != nil {
				h.unsettle()
				err = classify("ack", err)
			}
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (h *handle) unsettle() {
	h.mu.Lock()
	h.settled = false
	h.mu.Unlock()
}

// Nack ends the lease with NakWithDelay (or Nak for no delay).
func (d *Driver) Nack(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	if err := d.checkOpen("nack"); err != nil {
		return err
	}
	h, err := d.handleOf("nack", dv)
	if err != nil {
		return err
	}
	if err := h.claim("nack", dv.ID, true); err != nil {
		return err
	}
	if delay > 0 {
		err = h.msg.NakWithDelay(delay)
	} else {
		err = h.msg.Nak()
	}
	if err != nil {
		h.unsettle()
		return classify("nack", err)
	}
	if delay > 0 && !h.lc.dlq {
		d.rememberNak(h.lc.lane, h.seq, time.Now().Add(delay))
	}
	return nil
}

// Extend sends InProgress for each delivery, which restarts its AckWait,
// and keeps the delivery alive until lease from now if that is longer (see
// lease.go). Each delivery's LeaseDeadline is updated to the real value.
func (d *Driver) Extend(ctx context.Context, ds []*broker.Delivery, lease time.Duration) error {
	if err := d.checkOpen("extend"); err != nil {
		return err
	}
	var first error
	for _, dv := range ds {
		h, err := d.handleOf("extend", dv)
		if err == nil {
			err = h.extend(dv, lease)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (h *handle) extend(dv *broker.Delivery, lease time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.settled || h.lost || !now.Before(h.deadline) {
		return broker.LeaseLostError("extend", dv.ID)
	}
	if err := h.msg.InProgress(); err != nil {
		return classify("extend", err)
	}
	dv.LeaseDeadline = h.setLease(now, now.Add(lease))
	return nil
}

// DeadLetter publishes the message to the lane's dead-letter subject with
// dl in a header, then acks the live delivery and waits for the server to
// confirm it.
func (d *Driver) DeadLetter(ctx context.Context, dv *broker.Delivery, dl *broker.DeadLetter) error {
	if err := d.checkOpen("dead-letter"); err != nil {
		return err
	}
	h, err := d.handleOf("dead-letter", dv)
	if err != nil {
		return err
	}
	if dl == nil {
		return broker.Invalidf("dead-letter: nil dead letter")
	}
	if h.lc.dlq {
		return broker.KindError("dead-letter", broker.Permanent, broker.ErrInvalid, "delivery %s is already a dead letter", dv.ID)
	}
	if err := h.claim("dead-letter", dv.ID, false); err != nil {
		return err
	}
	if err := d.moveToDLQ(ctx, h.lc.lane, h.seq, h.msg.Data(), dv.ID, dv.Attempt, dl); err != nil {
		return err
	}
	if err := h.claim("dead-letter", dv.ID, true); err != nil {
		// The lease ended while publishing; the copy in the dead-letter
		// stream stays (a duplicate at worst, never a loss).
		return err
	}
	if err := h.msg.DoubleAck(ctx); err != nil {
		h.unsettle()
		return classify("dead-letter: ack", err)
	}
	return nil
}

// Replay publishes a dead letter back to its live lane as a new message
// (its stored envelope, so ID and fields are kept, attempts restart at 1)
// and removes it from the dead-letter stream.
func (d *Driver) Replay(ctx context.Context, dv *broker.Delivery) error {
	if err := d.checkOpen("replay"); err != nil {
		return err
	}
	h, err := d.handleOf("replay", dv)
	if err != nil {
		return err
	}
	if !h.lc.dlq {
		return broker.KindError("replay", broker.Permanent, broker.ErrInvalid, "delivery %s is not from a dead-letter queue", dv.ID)
	}
	if err := h.claim("replay", dv.ID, false); err != nil {
		return err
	}
	m := &natsgo.Msg{Subject: d.names.liveSubj(h.lc.lane), Data: h.msg.Data(), Header: natsgo.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, "replay-"+d.names.dlq+"-"+strconv.FormatUint(h.seq, 10))
	if _, err := d.publishSync(ctx, "replay", m); err != nil {
		return err
	}
	if err := h.claim("replay", dv.ID, true); err != nil {
		return err
	}
	if err := h.msg.DoubleAck(ctx); err != nil {
		h.unsettle()
		return classify("replay: ack", err)
	}
	return nil
}

// rememberNak records a nack delay so that Stats can count the message as
// delayed rather than in flight (known for this process's nacks only).
func (d *Driver) rememberNak(lane string, seq uint64, until time.Time) {
	d.nakUsed.Store(true)
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.nakked[lane]
	if m == nil {
		m = map[uint64]time.Time{}
		d.nakked[lane] = m
	}
	m[seq] = until
	if len(m) > 10000 {
		now := time.Now()
		for s, u := range m {
			if !u.After(now) {
				delete(m, s)
			}
		}
	}
}

func (d *Driver) forgetNak(lane string, seq uint64) {
	if !d.nakUsed.Load() {
		return // the common case: no nack delays in this process, no lock
	}
	d.mu.Lock()
	if m := d.nakked[lane]; m != nil {
		delete(m, seq)
	}
	d.mu.Unlock()
}

func (d *Driver) nakDelayed(lane string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	var n int64
	for s, u := range d.nakked[lane] {
		if u.After(now) {
			n++
		} else {
			delete(d.nakked[lane], s)
		}
	}
	return n
}
