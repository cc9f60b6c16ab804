package asynq

import (
	"cmp"
	"context"
	"strconv"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

func (d *Driver) markQueue(ctx context.Context, k *keys) error {
	if _, ok := d.queuesKnown.Load(k.name); ok {
		return nil
	}
	if err := d.rdb.SAdd(ctx, "asynq:queues", k.name).Err(); err != nil {
		return err
	}
	d.queuesKnown.Store(k.name, struct{}{})
	return nil
}

// Publish enqueues msgs: ready ones on the queue's pending list, future
// ones in its scheduled zset, in one script call per lane.
func (d *Driver) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	if err := d.check("publish"); err != nil {
		return nil, err
	}
	res := make([]broker.PublishResult, len(msgs))
	now := time.Now()
	// Group by lane, keeping order within each lane.
	var lanes []string
	byLane := map[string][]int{}
	for i, m := range msgs {
		if m == nil {
			res[i].Err = broker.Invalidf("publish: nil message")
			continue
		}
		res[i].ID = m.ID
		if _, ok := byLane[m.Lane]; !ok {
			lanes = append(lanes, m.Lane)
		}
		byLane[m.Lane] = append(byLane[m.Lane], i)
	}
	ttl := "0"
	if d.cfg.DedupWindow > 0 {
		ttl = strconv.FormatInt(max(d.cfg.DedupWindow.Milliseconds(), 1), 10)
	}
	for _, lane := range lanes {
		k := d.keys(lane)
		argv := []any{k.task, now.UnixNano(), ttl}
		var sent []int
		for _, i := range byLane[lane] {
			m := msgs[i]
			tm, err := toTask(m, k.name)
			if err != nil {
				res[i].Err = err
				continue
			}
			sc := ""
			if m.RunAt.After(now) {
				sc = score(m.RunAt)
			}
			// A message the framework holds (a run-at beyond MaxDelay) carries
			// its idempotency key in a header; claim it all the same, so the
			// key is deduplicated while the message is held.
			ikey := ""
			if key := cmp.Or(m.IdempotencyKey, m.Headers[broker.HeaderHeldKey]); key != "" {
				ikey = k.idem(m.Tenant, key)
			}
			hold := ""
			if _, ok := m.Headers[broker.HeaderHoldUntil]; ok {
				hold = "1"
			}
			argv = append(argv, m.ID, tm.encode(), sc, m.OrderingKey, ikey, hold)
			sent = append(sent, i)
		}
		if len(sent) == 0 {
			continue
		}
		fail := func(err error) {
			for _, i := range sent {
				res[i].Err = err
			}
		}
		if err := d.markQueue(ctx, k); err != nil {
			fail(classify("publish", err, false)) // nothing of the batch was written
			continue
		}
		out, err := publishScript.Run(ctx, d.rdb, []string{k.pending, k.scheduled, k.active, k.lease, k.notify}, argv...).Slice()
		if err == nil && len(out) != 2*len(sent) {
			err = broker.Errorf("publish", broker.UnknownOutcome, "publish script returned %d values for %d messages", len(out), len(sent))
		}
		if err != nil {
			fail(classify("publish", err, true))
			continue
		}
		for j, i := range sent {
			code, _ := out[2*j].(int64)
			id, _ := out[2*j+1].(string)
			switch code {
			case 0, 2:
				res[i].Duplicate = true
				if id != "" {
					res[i].ID = id
				}
			}
		}
	}
	return res, nil
}
