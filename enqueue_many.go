package switchyard

import (
	"context"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// EnqueueItem is one task for EnqueueMany.
type EnqueueItem struct {
	Args TaskArgs
	// Opts may be nil, as for Enqueue.
	Opts *EnqueueOpts
}

// EnqueueManyResult is how one item of EnqueueMany fared: Err, or the
// task's ID and whether it was a duplicate.
type EnqueueManyResult struct {
	EnqueueResult
	// Err is the item's own error: ErrInvalid for an item that does not
	// validate (nothing of it was recorded or published), else the
	// ledger's or the broker's error for this item (see Enqueue).
	Err error
}

// EnqueueMany enqueues a batch of tasks as Enqueue would enqueue each in
// turn, with one ledger transaction (Ledger.CreateMany) and the broker's
// batch publish (one SQLite transaction, one Redis script per lane, SQS
// batches of ten, pipelined RabbitMQ confirms, asynchronous NATS
// publishes) instead of one of each per task.
//
// It returns one result per item, in order. One bad item fails alone: the
// others are recorded and published. Idempotency keys keep their meaning
// inside the batch: an item repeating an earlier item's key (with the
// ledger: tenant and key; without: lane, tenant and key) gets the earlier
// item's task, Duplicate=true. Items that share an ordering key start in
// their order in items. The error is non-nil only when the call as a whole
// failed (the ledger's transaction did), and then nothing was recorded or
// published.
func (c *Client) EnqueueMany(ctx context.Context, items []EnqueueItem) ([]EnqueueManyResult, error) {
	if c.reliable {
		return c.enqueueManyReliable(ctx, items)
	}
	res := make([]EnqueueManyResult, len(items))
	msgs := make([]*broker.Message, len(items)) // nil: not to publish
	opts := make([]EnqueueOpts, len(items))
	for i, it := range items {
		m, o, err := c.message(ctx, it.Args, it.Opts)
		if err == nil && (o.ConcurrencyKey != "" || o.OnConcurrent != CancelInProgress) {
			err = broker.Invalidf("switchyard: EnqueueMany does not take a ConcurrencyKey; use Enqueue")
		}
		if err != nil {
			res[i].Err = err
			continue
		}
		msgs[i], opts[i] = m, o
	}
	if c.l != nil {
		if err := c.recordMany(ctx, msgs, opts, res); err != nil {
			return nil, err
		}
	}
	// Without a ledger the broker deduplicates; an item repeating an
	// earlier item's key waits for the earlier one's outcome instead of
	// sharing its driver batch, so that every driver sees them one after
	// the other.
	type dkey struct{ lane, tenant, key string }
	first := map[dkey]int{}
	follows := make([]int, len(items))
	var send, later []int
	for i, m := range msgs {
		follows[i] = -1
		if m == nil {
			continue
		}
		if c.l == nil && m.IdempotencyKey != "" {
			k := dkey{m.Lane, m.Tenant, m.IdempotencyKey}
			if j, ok := first[k]; ok {
				follows[i] = j
				later = append(later, i)
				continue
			}
			first[k] = i
		}
		send = append(send, i)
	}
	c.publishMany(ctx, msgs, send, res)
	var again []int
	for _, i := range later {
		j := follows[i]
		if res[j].Err != nil {
			again = append(again, i) // the earlier one failed: try this one
			continue
		}
		res[i].EnqueueResult = EnqueueResult{ID: res[j].ID, Duplicate: true}
	}
	c.publishMany(ctx, msgs, again, res)
	return res, nil
}

// recordMany records the tasks of msgs in the ledger in one CreateMany.
// A task that is new keeps its message; a duplicate's result is final
// (and its message is dropped) unless the existing task may never have
// been published, which Enqueue would publish again too.
func (c *Client) recordMany(ctx context.Context, msgs []*broker.Message, opts []EnqueueOpts, res []EnqueueManyResult) error {
	var idx []int
	var ts []*ledger.Task
	for i, m := range msgs {
		if m == nil {
			continue
		}
		o := opts[i]
		m.ID = broker.NewID()
		idx = append(idx, i)
		ts = append(ts, &ledger.Task{ID: m.ID, Tenant: o.Tenant, IdempotencyKey: o.IdempotencyKey, Kind: m.Kind,
			Lane: m.Lane, OrderingKey: o.OrderingKey, Args: m.Body, MaxAttempts: o.MaxAttempts, RunAt: o.RunAt,
			Deadline: o.Deadline, Metadata: o.Metadata})
	}
	if len(ts) == 0 {
		return nil
	}
	crs, err := c.l.CreateMany(ctx, ts)
	if err != nil {
		return err
	}
	created := map[string]bool{}
	for k, cr := range crs {
		if cr.Err == nil && cr.Created {
			created[cr.Task.ID] = true
			res[idx[k]].ID = cr.Task.ID
		}
	}
	for k, cr := range crs {
		i := idx[k]
		switch {
		case cr.Err != nil:
			res[i], msgs[i] = EnqueueManyResult{Err: cr.Err}, nil
		case cr.Created:
		default:
			res[i].EnqueueResult = EnqueueResult{ID: cr.Task.ID, Duplicate: true}
			t := cr.Task
			if created[t.ID] || t.State != ledger.Queued || t.Attempt != 0 {
				// Published by this call, or left the queue long ago.
				msgs[i] = nil
				continue
			}
			// Possibly never published (an earlier Enqueue failed after
			// recording it): publish it again under its own ID, as Enqueue
			// does; the ledger runs it once however many copies land.
			m := msgs[i]
			m.ID = t.ID
			m.Lane, m.Kind, m.Body = t.Lane, t.Kind, t.Args
		}
	}
	return nil
}

// publishMany publishes msgs[idx] in one Broker.Publish and fills their
// results (keeping the ledger's verdict when there is a ledger).
func (c *Client) publishMany(ctx context.Context, msgs []*broker.Message, idx []int, res []EnqueueManyResult) {
	if len(idx) == 0 {
		return
	}
	batch := make([]*broker.Message, len(idx))
	for k, i := range idx {
		batch[k] = msgs[i]
		if c.beforePublish != nil {
			c.beforePublish(ctx, msgs[i])
		}
	}
	prs, err := c.b.Publish(ctx, batch...)
	for k, i := range idx {
		var pr broker.PublishResult
		if err != nil {
			pr.Err = err // the broker failed the whole call (closed, say)
		} else {
			pr = prs[k]
		}
		switch {
		case pr.Err != nil:
			res[i] = EnqueueManyResult{Err: pr.Err}
		case c.l != nil:
			// The ledger decided what is new and what a duplicate.
		default:
			res[i].EnqueueResult = EnqueueResult{ID: pr.ID, Duplicate: pr.Duplicate}
		}
	}
}
