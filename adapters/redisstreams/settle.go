package redisstreams

import (
	"context"
	"strconv"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// handleOf checks that dv was delivered by this driver.
func (d *Driver) handleOf(op string, dv *broker.Delivery) (*handle, error) {
	if dv == nil {
		return nil, broker.KindError(op, broker.Permanent, broker.ErrInvalid, "nil delivery")
	}
	h, ok := dv.Handle.(*handle)
	if !ok || h.d != d {
		return nil, broker.KindError(op, broker.Permanent, broker.ErrInvalid, "delivery %s was not received through this redis-streams driver", dv.ID)
	}
	return h, nil
}

// settle marks h used by a final operation; a second one is refused
// locally with ErrLeaseLost (the script would refuse it too).
func (h *handle) settle(op, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.settled {
		return broker.LeaseLostError(op, id)
	}
	h.settled = true
	return nil
}

func (h *handle) unsettle() {
	h.mu.Lock()
	h.settled = false
	h.mu.Unlock()
}

// Ack removes the deliveries' entries (XACK and XDEL, one script call per
// queue), so that a stream holds exactly its unacknowledged entries. A
// delivery whose lease passed to another consumer is left alone and
// yields ErrLeaseLost.
func (d *Driver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	if err := d.checkOpen("ack"); err != nil {
		return err
	}
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	type batch struct {
		q  *queue
		hs []*handle
		ds []*broker.Delivery
	}
	var batches []*batch
	for _, dv := range ds {
		h, err := d.handleOf("ack", dv)
		if err == nil {
			err = h.settle("ack", dv.ID)
		}
		if err != nil {
			note(err)
			continue
		}
		var b *batch
		for _, x := range batches {
			if x.q == h.q {
				b = x
			}
		}
		if b == nil {
			b = &batch{q: h.q}
			batches = append(batches, b)
		}
		b.hs, b.ds = append(b.hs, h), append(b.ds, dv)
	}
	for _, b := range batches {
		del := "0"
		if b.q.dead {
			del = "1"
		}
		args := make([]any, 0, 2+2*len(b.hs))
		args = append(args, group, del)
		for _, h := range b.hs {
			args = append(args, h.member, h.id)
		}
		res, err := ackScript.Run(ctx, d.rdb, []string{b.q.stream, b.q.lease}, args...).Int64Slice()
		if err != nil {
			for _, h := range b.hs {
				h.unsettle()
			}
			note(classify("ack", scrub(err, d.cfg), false))
			continue
		}
		for i, ok := range res {
			if ok != 1 && i < len(b.ds) {
				note(broker.LeaseLostError("ack", b.ds[i].ID))
			}
		}
	}
	return first
}

// Nack ends the lease; the entry is due again after delay, with the next
// attempt number.
func (d *Driver) Nack(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	return d.nack(ctx, "nack", dv, delay, false)
}

// Release ends the lease without spending an attempt (broker.Releaser):
// the next delivery, after delay, has the same attempt number.
func (d *Driver) Release(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	return d.nack(ctx, "release", dv, delay, true)
}

func (d *Driver) nack(ctx context.Context, op string, dv *broker.Delivery, delay time.Duration, release bool) error {
	if err := d.checkOpen(op); err != nil {
		return err
	}
	h, err := d.handleOf(op, dv)
	if err != nil {
		return err
	}
	if err := h.settle(op, dv.ID); err != nil {
		return err
	}
	rels := h.rels
	if release {
		rels++
	}
	next := h.id + " " + strconv.FormatInt(h.gen, 10) + " " + strconv.FormatInt(rels, 10)
	ok, err := nackScript.Run(ctx, d.rdb, []string{h.q.lease, h.q.wait}, h.member, next, durMS(delay, 0)).Int64()
	if err != nil {
		h.unsettle()
		return classify(op, scrub(err, d.cfg), false)
	}
	if ok != 1 {
		return broker.LeaseLostError(op, dv.ID)
	}
	return nil
}

// Extend moves the leases' ends to lease from now (the lease set's
// scores). A delivery another consumer reclaimed yields ErrLeaseLost.
func (d *Driver) Extend(ctx context.Context, ds []*broker.Delivery, lease time.Duration) error {
	if err := d.checkOpen("extend"); err != nil {
		return err
	}
	var first error
	for _, dv := range ds {
		h, err := d.handleOf("extend", dv)
		if err == nil {
			err = d.extendOne(ctx, h, dv, lease)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (d *Driver) extendOne(ctx context.Context, h *handle, dv *broker.Delivery, lease time.Duration) error {
	h.mu.Lock()
	settled := h.settled
	h.mu.Unlock()
	if settled {
		return broker.LeaseLostError("extend", dv.ID)
	}
	ms := durMS(lease, 1)
	sent := time.Now()
	res, err := extendScript.Run(ctx, d.rdb, []string{h.q.lease}, ms, h.member).Int64Slice()
	if err != nil {
		return classify("extend", scrub(err, d.cfg), false)
	}
	if len(res) != 1 || res[0] != 1 {
		return broker.LeaseLostError("extend", dv.ID)
	}
	dv.LeaseDeadline = sent.Add(time.Duration(ms) * time.Millisecond)
	return nil
}

// move runs moveScript for h: the entry goes to the stream to with
// fields, and out of its queue, in one step.
func (d *Driver) move(ctx context.Context, op string, h *handle, to string, fields []any) error {
	if err := h.settle(op, h.id); err != nil {
		return err
	}
	del := "0"
	if h.q.dead {
		del = "1"
	}
	args := append([]any{group, h.member, h.id, del}, fields...)
	v, err := moveScript.Run(ctx, d.rdb, []string{h.q.stream, h.q.lease, to}, args...).Result()
	if err != nil {
		h.unsettle()
		return classify(op, scrub(err, d.cfg), true)
	}
	if n, ok := v.(int64); ok && n == 0 {
		return broker.LeaseLostError(op, h.id)
	}
	return nil
}

// DeadLetter moves the delivered entry to the lane's dead-letter stream
// with dl, and out of the live stream, atomically.
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
	if h.q.dead {
		return broker.KindError("dead-letter", broker.Permanent, broker.ErrInvalid, "delivery %s is already a dead letter", dv.ID)
	}
	return d.move(ctx, "dead-letter", h, d.keys.queue(h.q.lane, true).stream, deadFields(h.raw, dl, dv.ID, dv.Attempt))
}

// Replay moves a dead letter back to its live lane as a new entry (its
// stored envelope: ID and fields kept, attempts start at 1), atomically.
func (d *Driver) Replay(ctx context.Context, dv *broker.Delivery) error {
	if err := d.checkOpen("replay"); err != nil {
		return err
	}
	h, err := d.handleOf("replay", dv)
	if err != nil {
		return err
	}
	if !h.q.dead {
		return broker.KindError("replay", broker.Permanent, broker.ErrInvalid, "delivery %s is not from a dead-letter queue", dv.ID)
	}
	live, err := d.queue(h.q.lane, false)
	if err != nil {
		return err
	}
	if err := d.ensure(ctx, live, false); err != nil {
		return err
	}
	return d.move(ctx, "replay", h, live.stream, []any{fieldEnvelope, h.raw})
}
