package broker

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"sync"
	"time"
)

// routed is the Handle of a delivery that passed through a Router or a
// Migrating: the driver it came from and that driver's own delivery.
type routed struct {
	drv Driver
	mu  sync.Mutex
	in  *Delivery
	// seq is the framework's ordering sequence the message arrived with
	// (Broker removes the header once it has acquired the key), carried on
	// a re-published release so the copy keeps its place.
	seq string
}

func wrapDeliveries(drv Driver, ds []*Delivery) []*Delivery {
	out := make([]*Delivery, len(ds))
	for i, in := range ds {
		out[i] = &Delivery{Message: in.Message, Attempt: in.Attempt, LeaseDeadline: in.LeaseDeadline, DeadLetter: in.DeadLetter, Handle: &routed{drv: drv, in: in, seq: in.Headers[HeaderOrderSeq]}}
	}
	return out
}

func routedOf(op string, d *Delivery) (*routed, error) {
	if d == nil {
		return nil, Invalidf("%s: nil delivery", op)
	}
	h, ok := d.Handle.(*routed)
	if !ok {
		return nil, Invalidf("%s: delivery %s was not received through this router", op, d.ID)
	}
	return h, nil
}

// call runs f on the origin driver's own delivery, carrying the fields the
// layers above may have changed down to it and the new lease deadline back.
func (h *routed) call(d *Delivery, f func(in *Delivery) error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.in.Message = d.Message
	h.in.Attempt = d.Attempt
	h.in.DeadLetter = d.DeadLetter
	err := f(h.in)
	d.LeaseDeadline = h.in.LeaseDeadline
	return err
}

// multi runs f once per origin driver with that driver's own deliveries,
// in the order they first appear. Ack and Extend need only the driver's
// handle, so the fields the layers above changed are not carried down;
// Extend carries the new lease deadline up.
func multi(op string, ds []*Delivery, f func(Driver, []*Delivery) error) error {
	extend := op == "extend"
	var order []Driver
	outs := map[Driver][]*Delivery{}
	hs := map[Driver][]*routed{}
	seen := map[*routed]bool{}
	for _, d := range ds {
		h, err := routedOf(op, d)
		if err != nil {
			return err
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		if _, ok := outs[h.drv]; !ok {
			order = append(order, h.drv)
		}
		outs[h.drv] = append(outs[h.drv], d)
		hs[h.drv] = append(hs[h.drv], h)
	}
	var errs []error
	for _, drv := range order {
		list, handles := outs[drv], hs[drv]
		ins := make([]*Delivery, len(handles))
		for i, h := range handles {
			ins[i] = h.in
		}
		err := f(drv, ins)
		if extend {
			for i, h := range handles {
				list[i].LeaseDeadline = h.in.LeaseDeadline
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

func publishRouted(ctx context.Context, msgs []*Message, route func(string) (Driver, error)) ([]PublishResult, error) {
	res := make([]PublishResult, len(msgs))
	var order []Driver
	idx := map[Driver][]int{}
	for i, m := range msgs {
		d, err := route(m.Lane)
		if err != nil {
			res[i] = PublishResult{ID: m.ID, Err: err}
			continue
		}
		if _, ok := idx[d]; !ok {
			order = append(order, d)
		}
		idx[d] = append(idx[d], i)
	}
	for _, d := range order {
		is := idx[d]
		send := make([]*Message, len(is))
		for j, i := range is {
			send[j] = msgs[i]
		}
		rs, err := d.Publish(ctx, send)
		if err == nil && len(rs) != len(send) {
			err = Errorf("publish", Permanent, "driver returned %d results for %d messages", len(rs), len(send))
		}
		for j, i := range is {
			if err != nil {
				res[i] = PublishResult{ID: msgs[i].ID, Err: err}
			} else {
				res[i] = rs[j]
			}
		}
	}
	return res, nil
}

func nackRouted(ctx context.Context, d *Delivery, delay time.Duration) error {
	h, err := routedOf("nack", d)
	if err != nil {
		return err
	}
	return h.call(d, func(in *Delivery) error { return h.drv.Nack(ctx, in, delay) })
}

func deadLetterRouted(ctx context.Context, d *Delivery, dl *DeadLetter) error {
	h, err := routedOf("dead-letter", d)
	if err != nil {
		return err
	}
	return h.call(d, func(in *Delivery) error { return h.drv.DeadLetter(ctx, in, dl) })
}

func replayRouted(ctx context.Context, d *Delivery) error {
	h, err := routedOf("replay", d)
	if err != nil {
		return err
	}
	return h.call(d, func(in *Delivery) error { return h.drv.Replay(ctx, in) })
}

func releaseRouted(ctx context.Context, d *Delivery, delay time.Duration) error {
	h, err := routedOf("release", d)
	if err != nil {
		return err
	}
	return h.call(d, func(in *Delivery) error {
		if rel, ok := h.drv.(Releaser); ok {
			return rel.Release(ctx, in, delay)
		}
		now := time.Now()
		c := in.Message.Clone()
		if c.Headers == nil {
			c.Headers = map[string]string{}
		}
		until := now.Add(delay)
		c.Headers[HeaderHoldUntil] = until.UTC().Format(time.RFC3339Nano)
		if _, ok := c.Headers[HeaderRunAt]; !ok {
			c.Headers[HeaderRunAt] = ""
			if !in.RunAt.IsZero() {
				c.Headers[HeaderRunAt] = in.RunAt.UTC().Format(time.RFC3339Nano)
			}
		}
		if base := d.Attempt - 1; base > 0 {
			c.Headers[HeaderAttemptBase] = strconv.Itoa(base)
		} else {
			delete(c.Headers, HeaderAttemptBase)
		}
		if c.IdempotencyKey != "" {
			c.Headers[HeaderHeldKey] = c.IdempotencyKey
			c.IdempotencyKey = ""
		}
		if h.seq != "" {
			c.Headers[HeaderOrderSeq] = h.seq
		}
		c.RunAt = until
		rs, err := h.drv.Publish(ctx, []*Message{c})
		if err == nil && len(rs) == 1 {
			err = rs[0].Err
		}
		if err != nil {
			return err
		}
		return h.drv.Ack(ctx, []*Delivery{in})
	})
}

func listLanes(ctx context.Context, d Driver, set map[string]bool) error {
	l, ok := d.(LaneLister)
	if !ok {
		return nil
	}
	ls, err := l.Lanes(ctx)
	if err != nil {
		return err
	}
	for _, x := range ls {
		set[x] = true
	}
	return nil
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
