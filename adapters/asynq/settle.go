package asynq

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// handle is a Delivery's reference to its task.
type handle struct {
	k    *keys
	id   string
	tok  string
	tm   *taskMessage // nil when the stored message is undecodable
	dead bool
}

func handleOf(op string, dl *broker.Delivery) (*handle, error) {
	if dl == nil {
		return nil, broker.Invalidf("%s: nil delivery", op)
	}
	h, ok := dl.Handle.(*handle)
	if !ok || h == nil {
		return nil, broker.Invalidf("%s: delivery %s was not received through the asynq adapter", op, dl.ID)
	}
	return h, nil
}

// groupHandles splits deliveries by queue and kind (live or dead letter).
func groupHandles(op string, ds []*broker.Delivery) (map[string][]*handle, []string, error) {
	groups := map[string][]*handle{}
	var order []string
	for _, dv := range ds {
		h, err := handleOf(op, dv)
		if err != nil {
			return nil, nil, err
		}
		g := h.k.name
		if h.dead {
			g = "dead\x00" + g
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], h)
	}
	return groups, order, nil
}

func lostError(op string, lost []string) error {
	if len(lost) == 0 {
		return nil
	}
	if len(lost) == 1 {
		return broker.LeaseLostError(op, lost[0])
	}
	return broker.KindError(op, broker.Permanent, broker.ErrLeaseLost, "%d messages (first %s): %w", len(lost), lost[0], broker.ErrLeaseLost)
}

// Ack deletes the tasks (asynq's "done"), or, for dead letters, removes
// them from the archive for good. A delivery whose lease passed to another
// consumer is left alone and reported with ErrLeaseLost.
func (d *Driver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	if err := d.check("ack"); err != nil {
		return err
	}
	groups, order, err := groupHandles("ack", ds)
	if err != nil {
		return err
	}
	var lost []string
	now := time.Now()
	for _, g := range order {
		hs := groups[g]
		k := hs[0].k
		var l []string
		if hs[0].dead {
			l, err = d.deadOp(ctx, "ack", k, "", "", hs)
		} else {
			argv := make([]any, 0, 2+2*len(hs))
			argv = append(argv, k.task, now.Add(statsTTL).Unix())
			for _, h := range hs {
				argv = append(argv, h.id, h.tok)
			}
			l, err = ackScript.Run(ctx, d.rdb, []string{k.active, k.lease, k.olock, k.daily(k.processed, now), k.processed}, argv...).StringSlice()
			err = classify("ack", err, false)
		}
		if err != nil {
			return err
		}
		lost = append(lost, l...)
	}
	return lostError("ack", lost)
}

// Nack moves the task to asynq's retry zset (or straight back to pending
// when delay is zero) with retried + 1.
func (d *Driver) Nack(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	return d.giveBack(ctx, "nack", dv, delay, true, "")
}

// NackWithError is Nack recording errText as the task's ErrorMsg
// (broker.NackErrorer), as asynq's own retry does: asynq's Inspector and
// asynqmon show it as the retry's LastErr.
func (d *Driver) NackWithError(ctx context.Context, dv *broker.Delivery, delay time.Duration, errText string) error {
	return d.giveBack(ctx, "nack", dv, delay, true, errText)
}

// Release is Nack without spending an attempt (broker.Releaser): retried
// stays as it was, so the next delivery has the same Attempt.
func (d *Driver) Release(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	return d.giveBack(ctx, "release", dv, delay, false, "")
}

func (d *Driver) giveBack(ctx context.Context, op string, dv *broker.Delivery, delay time.Duration, failed bool, errText string) error {
	if err := d.check(op); err != nil {
		return err
	}
	h, err := handleOf(op, dv)
	if err != nil {
		return err
	}
	if h.dead {
		lost, err := d.deadOp(ctx, "release", h.k, "", "", []*handle{h})
		if err != nil {
			return err
		}
		return lostError(op, lost)
	}
	if h.tm == nil {
		return broker.Invalidf("%s: delivery %s has no decodable message", op, h.id)
	}
	now := time.Now()
	tm := *h.tm
	count := ""
	if failed {
		tm.Retried++
		tm.LastFailedAt = now.Unix()
		count = "1"
		if errText != "" {
			tm.ErrorMsg = errText
		}
	}
	at := ""
	if delay > 0 {
		at = score(now.Add(delay))
	}
	k := h.k
	n, err := nackScript.Run(ctx, d.rdb,
		[]string{k.active, k.lease, k.retry, k.pending, k.notify, k.daily(k.processed, now), k.daily(k.failed, now), k.processed, k.failed, k.olock},
		k.task, h.id, h.tok, tm.encode(), at, now.UnixNano(), now.Add(statsTTL).Unix(), count).Int64()
	if err != nil {
		return classify(op, err, false)
	}
	if n != 1 {
		return broker.LeaseLostError(op, h.id)
	}
	return nil
}

// Extend moves the lease deadlines (asynq's lease zset) to lease from now
// and updates each delivery's LeaseDeadline.
func (d *Driver) Extend(ctx context.Context, ds []*broker.Delivery, lease time.Duration) error {
	if err := d.check("extend"); err != nil {
		return err
	}
	groups, order, err := groupHandles("extend", ds)
	if err != nil {
		return err
	}
	end := time.UnixMilli(time.Now().Add(lease).UnixMilli())
	var lost []string
	for _, g := range order {
		hs := groups[g]
		k := hs[0].k
		var l []string
		if hs[0].dead {
			l, err = d.deadOp(ctx, "extend", k, "", score(end), hs)
		} else {
			argv := []any{k.task, score(end)}
			for _, h := range hs {
				argv = append(argv, h.id, h.tok)
			}
			l, err = extendScript.Run(ctx, d.rdb, []string{k.lease}, argv...).StringSlice()
			err = classify("extend", err, false)
		}
		if err != nil {
			return err
		}
		lost = append(lost, l...)
	}
	lostSet := map[string]bool{}
	for _, id := range lost {
		lostSet[id] = true
	}
	for _, dv := range ds {
		if !lostSet[dv.ID] {
			dv.LeaseDeadline = end
		}
	}
	return lostError("extend", lost)
}
