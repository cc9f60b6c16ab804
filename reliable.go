package switchyard

import (
	"context"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Reliable push (ClientConfig.ReliablePush). Each task is recorded with an
// outbox row leased to this Client, in one ledger write; the Client then
// publishes it itself and deletes the row. When the publish fails (the
// broker is unreachable), the row is released and a relay publishes the
// task once the broker is back; when the Client dies in between, a relay
// publishes it once the lease has passed. Either way Enqueue has already
// succeeded: the task is durable in the ledger from the first write on.
// The cost is one more ledger write per call (the delete), against a plain
// Enqueue.

// enqueueReliable is Enqueue with reliable push, for a validated message.
func (c *Client) enqueueReliable(ctx context.Context, m *broker.Message, o EnqueueOpts) (*EnqueueResult, error) {
	ot := outboxTask(m, o)
	rs, err := c.pushReliable(ctx, []*broker.Message{m}, []ledger.OutboxTask{ot})
	if err != nil {
		return nil, err
	}
	if rs[0].Err != nil {
		return nil, rs[0].Err
	}
	r := rs[0].EnqueueResult
	return &r, nil
}

// enqueueManyReliable is EnqueueMany with reliable push.
func (c *Client) enqueueManyReliable(ctx context.Context, items []EnqueueItem) ([]EnqueueManyResult, error) {
	res := make([]EnqueueManyResult, len(items))
	var (
		msgs []*broker.Message
		ots  []ledger.OutboxTask
		idx  []int
	)
	for i, it := range items {
		m, o, err := c.message(ctx, it.Args, it.Opts)
		if err != nil {
			res[i].Err = err
			continue
		}
		msgs, ots, idx = append(msgs, m), append(ots, outboxTask(m, o)), append(idx, i)
	}
	if len(ots) == 0 {
		return res, nil
	}
	rs, err := c.pushReliable(ctx, msgs, ots)
	if err != nil {
		return nil, err
	}
	for k, r := range rs {
		res[idx[k]] = r
	}
	return res, nil
}

// outboxTask assigns m its task ID, applies BeforePublish and returns the
// outbox task that records it.
func outboxTask(m *broker.Message, o EnqueueOpts) ledger.OutboxTask {
	m.ID = broker.NewID()
	return ledger.OutboxTask{
		Task: &ledger.Task{ID: m.ID, Tenant: o.Tenant, IdempotencyKey: o.IdempotencyKey, Kind: m.Kind, Lane: m.Lane,
			OrderingKey: o.OrderingKey, Args: m.Body, MaxAttempts: o.MaxAttempts, RunAt: o.RunAt, Deadline: o.Deadline,
			Metadata: o.Metadata},
		Headers: m.Headers,
	}
}

// pushReliable records ots (leased to this Client's relay owner), publishes
// the new ones (and duplicates that may never have been published, as
// Enqueue does) and settles their rows.
func (c *Client) pushReliable(ctx context.Context, msgs []*broker.Message, ots []ledger.OutboxTask) ([]EnqueueManyResult, error) {
	if c.beforePublish != nil {
		for _, m := range msgs {
			c.beforePublish(ctx, m)
		}
		for i := range ots {
			ots[i].Headers = msgs[i].Headers
		}
	}
	r := c.relay
	crs, err := r.o.CreateOutbox(ctx, ots, r.owner, r.cfg.Lease)
	if err != nil {
		return nil, err
	}
	c.startRelay()
	res := make([]EnqueueManyResult, len(ots))
	var (
		send  []*broker.Message
		sendI []int
		mine  []bool // the row is this call's (a new task)
	)
	sentID := map[string]bool{}
	for i, cr := range crs {
		if cr.Err != nil {
			res[i].Err = cr.Err
			continue
		}
		res[i].EnqueueResult = EnqueueResult{ID: cr.Task.ID, Duplicate: !cr.Created}
		t := cr.Task
		if sentID[t.ID] || (!cr.Created && (t.State != ledger.Queued || t.Attempt != 0)) {
			continue
		}
		m := msgs[i]
		if !cr.Created {
			// Possibly never published: publish it again under its own ID.
			m.ID, m.Lane, m.Kind, m.Body = t.ID, t.Lane, t.Kind, t.Args
		}
		sentID[t.ID] = true
		send, sendI, mine = append(send, m), append(sendI, i), append(mine, cr.Created)
	}
	if len(send) == 0 {
		return res, nil
	}
	prs, perr := c.b.Publish(ctx, send...)
	var done, failed []string
	var lastErr string
	for k, i := range sendI {
		err := perr
		if err == nil {
			err = prs[k].Err
		}
		switch {
		case err == nil && mine[k]:
			done = append(done, res[i].ID)
		case err == nil:
		case mine[k]:
			// Recorded: the relay publishes it once the broker takes it.
			failed, lastErr = append(failed, res[i].ID), err.Error()
		default:
			// A duplicate without a row of this call's: as Enqueue, report
			// the failed publish so the caller can retry.
			res[i] = EnqueueManyResult{Err: err}
		}
	}
	sctx := context.WithoutCancel(ctx)
	if err := r.o.DoneOutbox(sctx, r.owner, done); err != nil {
		// The rows stay: the relay publishes them again once their lease
		// passes, a harmless copy. Enqueue has succeeded.
		r.cfg.Logger.Warn("switchyard: reliable push: deleting published outbox rows", "err", err)
	}
	if len(failed) > 0 {
		if err := r.o.ReleaseOutbox(sctx, r.owner, failed, r.backoff(0), lastErr); err != nil {
			r.cfg.Logger.Warn("switchyard: reliable push: releasing outbox rows", "err", err)
		}
		r.nudge()
	}
	return res, nil
}

// startRelay starts the Client's relay (once).
func (c *Client) startRelay() { c.relay.start() }

// StartRelay starts the Client's outbox relay now, where it would
// otherwise start at the Client's first outbox write: a process that
// enqueues with plain Enqueue and runs no Server can publish the outbox
// rows of others this way. It does nothing without an outbox, with
// RelayConfig.Off, or when the relay runs already; Close stops it.
func (c *Client) StartRelay() { c.relay.start() }

// Close stops the Client's outbox relay, if it runs, waiting for it
// (bounded by ctx). Rows it held are published by another relay once
// their lease has passed. The Client stays usable for calls that need no
// relay; the broker and ledger are the caller's to close.
func (c *Client) Close(ctx context.Context) error { return c.relay.stop(ctx) }
