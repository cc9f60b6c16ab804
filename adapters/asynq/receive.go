package asynq

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Receive leases up to req.Max tasks in one script call per look. When the
// queue is empty it waits for a notification (Pub/Sub), the next due
// scheduled task or expiring lease, or the poll interval, whichever is
// first, until req.Wait has passed.
func (d *Driver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	if err := d.check("receive"); err != nil {
		return nil, err
	}
	if req.Max <= 0 {
		req.Max = 1
	}
	if req.Max > d.cfg.MaxBatch {
		req.Max = d.cfg.MaxBatch
	}
	if req.Lease <= 0 {
		req.Lease = 30 * time.Second
	}
	k := d.keys(req.Lane)
	deadline := time.Now().Add(req.Wait)
	for {
		var wake <-chan struct{}
		if req.Wait > 0 {
			wake = d.notify.wait(ctx, k.notify)
		}
		var (
			ds    []*broker.Delivery
			next  time.Duration
			again bool
			err   error
		)
		if cerr := ctx.Err(); cerr != nil {
			return nil, &broker.Error{Op: "receive", Class: broker.Transient, Err: cerr}
		}
		// The script runs to its end even if ctx ends meanwhile: a reply
		// abandoned mid-flight would leave its tasks leased to no one
		// until the lease ends. Redis's read timeout still bounds it.
		sctx := context.WithoutCancel(ctx)
		if req.DeadLetters {
			ds, err = d.receiveDead(sctx, k, req)
			next = -1
		} else {
			ds, next, again, err = d.dequeue(sctx, k, req)
		}
		if err != nil {
			return nil, err
		}
		if cerr := ctx.Err(); cerr != nil && len(ds) > 0 {
			// Cancelled: a caller that gave up may drop the deliveries;
			// give them back unspent first.
			for _, dv := range ds {
				if rerr := d.Release(sctx, dv, 0); rerr != nil {
					d.log.Warn("asynq: could not give back a task taken by a cancelled receive; it comes back after its lease", "queue", k.name, "id", dv.ID, "err", rerr)
				}
			}
			return nil, &broker.Error{Op: "receive", Class: broker.Transient, Err: cerr}
		}
		left := time.Until(deadline)
		if len(ds) > 0 || req.Wait <= 0 || left <= 0 {
			return ds, nil
		}
		if again {
			continue
		}
		sleep := min(left, d.cfg.Poll)
		if next >= 0 && next < sleep {
			sleep = next
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, &broker.Error{Op: "receive", Class: broker.Transient, Err: ctx.Err()}
		case <-d.done:
			t.Stop()
			return nil, broker.ClosedError("receive")
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// dequeue is one look at the queue. again reports that expired leases were
// recovered, so another look may find them.
func (d *Driver) dequeue(ctx context.Context, k *keys, req broker.ReceiveRequest) ([]*broker.Delivery, time.Duration, bool, error) {
	now := time.Now()
	leaseEnd := now.Add(req.Lease)
	leaseEnd = time.UnixMilli(leaseEnd.UnixMilli())
	window := min(max(4*req.Max, 100), 2000)
	res, err := dequeueScript.Run(ctx, d.rdb,
		[]string{k.pending, k.active, k.lease, k.paused, k.scheduled, k.retry, k.olock},
		k.task, score(now), now.UnixNano(), score(leaseEnd), req.Max, window).Slice()
	if err != nil {
		return nil, 0, false, classify("receive", err, false)
	}
	if len(res) != 3 {
		return nil, 0, false, broker.Errorf("receive", broker.Permanent, "dequeue script returned %d values", len(res))
	}
	nextMS, _ := res[0].(int64)
	items, _ := res[1].([]any)
	expired, _ := res[2].([]any)
	ds := make([]*broker.Delivery, 0, len(items)/3)
	for i := 0; i+2 < len(items); i += 3 {
		id, _ := items[i].(string)
		raw, _ := items[i+1].(string)
		tok, _ := items[i+2].(string)
		if raw == "" {
			d.deadLetterMissing(ctx, k, id, tok)
			continue
		}
		tm, err := decodeTaskMessage([]byte(raw))
		var m *broker.Message
		if err == nil {
			m, err = fromTask(tm, id, req.Lane)
		}
		if err != nil {
			d.deadLetterUndecodable(ctx, k, id, tok, err)
			continue
		}
		ds = append(ds, &broker.Delivery{
			Message:       *m,
			Attempt:       int(tm.Retried) + 1,
			LeaseDeadline: leaseEnd,
			Handle:        &handle{k: k, id: id, tok: tok, tm: tm},
		})
	}
	again := false
	if len(expired) > 0 {
		n, err := d.recoverExpired(ctx, k, expired, now)
		if err != nil && len(ds) == 0 {
			return nil, 0, false, err
		}
		again = n > 0
	}
	next := time.Duration(-1)
	if nextMS >= 0 {
		next = time.Duration(nextMS) * time.Millisecond
	}
	return ds, next, again, nil
}

// recoverExpired returns tasks whose lease expired (a crashed, stuck or
// closed consumer) to the head of the queue with retried + 1, as asynq's
// recoverer does, so their next delivery has a higher Attempt.
func (d *Driver) recoverExpired(ctx context.Context, k *keys, expired []any, now time.Time) (int64, error) {
	argv := []any{k.task, score(now), now.UnixNano()}
	for i := 0; i+2 < len(expired); i += 3 {
		id, _ := expired[i].(string)
		raw, _ := expired[i+1].(string)
		tok, _ := expired[i+2].(string)
		if raw == "" {
			if !d.deadLetterMissing(ctx, k, id, tok) {
				// The hash is gone altogether: nothing to archive. The
				// recover script drops the orphan id; say so.
				d.log.Warn("asynq: removed a leased task id whose task hash is gone (deleted behind the framework's back); no dead letter is possible",
					"queue", k.name, "id", id)
				argv = append(argv, id, tok, "")
			}
			continue
		}
		tm, err := decodeTaskMessage([]byte(raw))
		if err == nil {
			_, err = fromTask(tm, id, "")
		}
		if err != nil {
			d.deadLetterUndecodable(ctx, k, id, tok, err)
			continue
		}
		tm.Retried++
		tm.ErrorMsg = "switchyard: lease expired"
		tm.LastFailedAt = now.Unix()
		argv = append(argv, id, tok, tm.encode())
	}
	if len(argv) == 3 {
		return 0, nil
	}
	n, err := recoverScript.Run(ctx, d.rdb, []string{k.active, k.lease, k.pending, k.notify}, argv...).Int64()
	if err != nil {
		return 0, classify("receive: recover", err, false)
	}
	return n, nil
}
