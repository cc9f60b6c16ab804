package switchyard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Sandbox replay: diagnose a dead letter by running a copy of it. The
// copy's handler runs and its steps run, but every switchyard.Effect is
// recorded in the ledger as would_do and not performed (Effect returns T's
// zero value; Task.Job.Sandbox tells the handler), and every task the
// handler enqueues is a sandbox copy too. What the sandbox cannot stop is a
// write the handler makes outside Effect (a direct HTTP call or database
// write): keep side effects in Effect, or check Task.Job.Sandbox.

// ReplaySandbox runs a copy of dead letter id of lane in sandbox mode and
// returns the copy's task ID. It needs a ledger (ErrNoLedger).
//
// The copy is a new task: a new ID, the original's kind, lane, tenant,
// arguments, max attempts and metadata, plus metadata
// scheduler.MetaSandboxOf naming the original — but no idempotency key, no
// ordering key (it must not hold up the key's real tasks) and no deadline
// (the original's has likely passed). It is recorded in the ledger with a
// "sandbox_created" event naming actor (default "operator"), then
// published with scheduler.HeaderSandbox. The dead letter stays in the
// dead-letter queue and the original task stays dead; its event log gets a
// "sandbox_replayed" event naming actor and the copy.
//
// To find the dead letter, ReplaySandbox receives the lane's dead letters
// in batches, holding each leased until the scan ends, then gives them all
// back. An id not in the dead-letter queue returns an error matching
// ledger.ErrNotFound.
func (c *Client) ReplaySandbox(ctx context.Context, lane, id, actor string) (string, error) {
	if err := broker.ValidateName("lane", lane); err != nil {
		return "", err
	}
	if err := validateID(id); err != nil {
		return "", err
	}
	if c.l == nil {
		return "", ErrNoLedger
	}
	if actor == "" {
		actor = "operator"
	}
	d, giveBack, err := c.findDead(ctx, lane, id)
	defer giveBack()
	if err != nil {
		return "", err
	}

	orig, err := c.l.Get(ctx, id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		orig = nil // dead-lettered without a ledger record: the message is all there is
	case err != nil:
		return "", err
	}
	meta := map[string]string{}
	if orig != nil {
		for k, v := range orig.Metadata {
			meta[k] = v
		}
	} else {
		for k, v := range d.Headers {
			if len(k) > len(metaPrefix) && k[:len(metaPrefix)] == metaPrefix {
				meta[k[len(metaPrefix):]] = v
			}
		}
	}
	meta[scheduler.MetaSandboxOf] = id

	// The copy goes to the task's lane (for a fair lane, the lane, not the
	// shard the dead letter sits in).
	copyLane := c.b.LaneOf(d.Lane)
	if orig != nil {
		copyLane = orig.Lane
	}
	t, _, err := c.l.Create(ctx, &ledger.Task{ID: broker.NewID(), Tenant: d.Tenant, Kind: d.Kind, Lane: copyLane,
		Args: d.Body, MaxAttempts: d.MaxAttempts, Metadata: meta})
	if err != nil {
		return "", err
	}
	if err := c.l.AppendEvent(ctx, ledger.Event{TaskID: t.ID, Reason: "sandbox_created",
		Detail: "sandbox replay of dead letter " + id + ": effects are recorded as would_do, not performed", Actor: actor}); err != nil {
		return "", err
	}
	m := &broker.Message{ID: t.ID, Lane: t.Lane, Kind: t.Kind, Body: t.Args, Tenant: t.Tenant, MaxAttempts: t.MaxAttempts,
		Headers: map[string]string{scheduler.HeaderSandbox: id}}
	for k, v := range meta {
		m.Headers[metaPrefix+k] = v
	}
	if c.beforePublish != nil {
		c.beforePublish(ctx, m)
	}
	if _, err := c.b.PublishOne(ctx, m); err != nil {
		_, _ = c.l.Transition(context.WithoutCancel(ctx), ledger.TransitionRequest{ID: t.ID, From: []ledger.State{ledger.Queued},
			To: ledger.Cancelled, Reason: "sandbox_not_published", Detail: err.Error(), Actor: actor})
		return "", err
	}
	if orig != nil {
		if err := c.l.AppendEvent(ctx, ledger.Event{TaskID: id, Reason: "sandbox_replayed",
			Detail: "replayed in sandbox mode as task " + t.ID, Actor: actor}); err != nil {
			return t.ID, err
		}
	}
	return t.ID, nil
}

// maxDeadScan bounds how many dead letters findDead looks at.
const maxDeadScan = 10000

// findDead scans lane's dead-letter queue for id. Every delivery it
// receives, the match included, stays leased until giveBack (always to be
// called) returns them all to the queue. The scan ends at the match, at an
// empty receive that the lane's stats confirm (brokers that sample, like
// SQS, can answer empty while letters remain), when letters keep coming
// round again, or after maxDeadScan letters.
func (c *Client) findDead(ctx context.Context, lane, id string) (*broker.Delivery, func(), error) {
	var held []*broker.Delivery
	giveBack := func() {
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, d := range held {
			_ = c.b.Nack(gctx, d, 0) // on failure it comes back when its lease ends
		}
	}
	seen := map[string]bool{}
	notFound := func(why string) error {
		return fmt.Errorf("switchyard: no dead letter %s in lane %s (%s): %w", id, lane, why, ledger.ErrNotFound)
	}
	repeats := 0
	for empties := 0; ; {
		ds, err := c.b.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 100, Lease: 2 * time.Minute, Wait: time.Second, DeadLetters: true})
		held = append(held, ds...)
		if err != nil {
			return nil, giveBack, err
		}
		if len(ds) == 0 {
			st, err := c.b.Stats(ctx, lane)
			if err != nil || st.DeadLettered <= int64(len(seen)) || empties >= 2 {
				return nil, giveBack, notFound(fmt.Sprintf("looked at %d", len(seen)))
			}
			empties++
			continue
		}
		for _, d := range ds {
			if d.ID == id {
				return d, giveBack, nil
			}
			if seen[d.ID] {
				// A duplicate in the queue, or a lease that ran out: a whole
				// batch of them means the scan has come round.
				if repeats++; repeats >= 100 {
					return nil, giveBack, notFound("the scan came round to letters it had seen")
				}
			}
			seen[d.ID] = true
		}
		if len(seen) >= maxDeadScan {
			return nil, giveBack, notFound(fmt.Sprintf("looked at the first %d", maxDeadScan))
		}
	}
}

// validateID checks a task ID argument.
func validateID(id string) error {
	if id == "" {
		return broker.Invalidf("switchyard: task id is empty")
	}
	if len(id) > broker.MaxKeyLen {
		return broker.Invalidf("switchyard: task id is %d bytes, the limit is %d", len(id), broker.MaxKeyLen)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] == 0x7f {
			return broker.Invalidf("switchyard: task id contains a control character")
		}
	}
	return nil
}
