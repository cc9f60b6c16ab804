package switchyard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Human review. A handler returns AwaitApproval(reason, action); the task
// waits in state awaiting_review (it needs a ledger). Reviewers list the
// queue (oldest first: old reviews escalate), claim, approve or reject.
// Approval publishes the task again in its own lane with the decision in
// Task.Review; rejection ends it with the reviewer's reason.

// ReviewItem is a task awaiting review.
type ReviewItem struct {
	Task *ledger.Task
	// Reason is why the handler asked for review; Action what it wants to
	// do.
	Reason, Action string
	// Since is when the task started waiting; Age how long ago that is.
	Since time.Time
	Age   time.Duration
	// ClaimedBy is the reviewer who claimed it, if anyone.
	ClaimedBy string
}

// ReviewFilter selects reviews. The zero value lists every tenant's, up to
// 100.
type ReviewFilter struct {
	Tenant string
	Limit  int
}

// ErrNotAwaitingReview is returned when approving, rejecting or claiming a
// task that is not awaiting review.
var ErrNotAwaitingReview = errors.New("switchyard: task is not awaiting review")

// ErrClaimedByOther is returned when a reviewer claims, approves or rejects
// a review another reviewer has claimed: a claim is enforced, so two
// reviewers never decide one task. It matches ledger.ErrConflict too.
var ErrClaimedByOther = fmt.Errorf("switchyard: the review is claimed by another reviewer: %w", ledger.ErrConflict)

// claimedByOther is the error for reviewer acting on task id claimed by
// holder.
func claimedByOther(id, holder string) error {
	return fmt.Errorf("%w: task %s is claimed by %s; only %s can approve or reject it", ErrClaimedByOther, id, holder, holder)
}

// checkClaim refuses reviewer's decision on task id when another reviewer
// holds its claim. (A claim taken between this check and the decision is
// not seen: claims keep reviewers from colliding, the ledger's transition
// keeps the decision single.)
func (c *Client) checkClaim(ctx context.Context, id, reviewer string) error {
	it, err := c.Review(ctx, id)
	if err != nil {
		return err
	}
	if it.ClaimedBy != "" && it.ClaimedBy != reviewer {
		return claimedByOther(id, it.ClaimedBy)
	}
	return nil
}

// Reviews lists tasks awaiting review, oldest first.
func (c *Client) Reviews(ctx context.Context, f ReviewFilter) ([]*ReviewItem, error) {
	if c.l == nil {
		return nil, ErrNoLedger
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	ts, err := c.l.List(ctx, ledger.Filter{Tenant: f.Tenant, States: []ledger.State{ledger.AwaitingReview}, Limit: min(limit, 1000)})
	if err != nil {
		return nil, err
	}
	out := make([]*ReviewItem, 0, len(ts))
	for _, t := range ts {
		it, err := c.reviewItem(ctx, t)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out, nil
}

// Review returns one task awaiting review.
func (c *Client) Review(ctx context.Context, id string) (*ReviewItem, error) {
	if c.l == nil {
		return nil, ErrNoLedger
	}
	t, err := c.l.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.State != ledger.AwaitingReview {
		return nil, fmt.Errorf("%w: %s is %s", ErrNotAwaitingReview, id, t.State)
	}
	return c.reviewItem(ctx, t)
}

func (c *Client) reviewItem(ctx context.Context, t *ledger.Task) (*ReviewItem, error) {
	evs, err := c.l.Events(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	it := &ReviewItem{Task: t, Since: t.UpdatedAt}
	for _, e := range evs {
		switch {
		case e.To == ledger.AwaitingReview:
			it.Since, it.ClaimedBy = e.At, ""
			var d struct{ Reason, Action string }
			if json.Unmarshal([]byte(e.Detail), &d) == nil {
				it.Reason, it.Action = d.Reason, d.Action
			}
		case e.Reason == "review_claimed" && e.To == "":
			it.ClaimedBy = strings.TrimPrefix(e.Actor, "reviewer:")
		}
	}
	it.Age = time.Since(it.Since)
	return it, nil
}

// Claim records that reviewer is looking at the task, so others can see
// it is taken. It fails if another reviewer holds the claim.
func (c *Client) Claim(ctx context.Context, id, reviewer string) error {
	it, err := c.Review(ctx, id)
	if err != nil {
		return err
	}
	if reviewer == "" {
		return broker.Invalidf("switchyard: a reviewer name is required")
	}
	if it.ClaimedBy != "" && it.ClaimedBy != reviewer {
		return claimedByOther(id, it.ClaimedBy)
	}
	return c.l.AppendEvent(ctx, ledger.Event{TaskID: id, At: time.Now(), Reason: "review_claimed", Actor: "reviewer:" + reviewer})
}

// Approve resumes the task in its own lane; the handler sees the decision in
// Task.Review. A task claimed by another reviewer is refused with
// ErrClaimedByOther.
func (c *Client) Approve(ctx context.Context, id, reviewer, note string) error {
	if c.l == nil {
		return ErrNoLedger
	}
	if reviewer == "" {
		return broker.Invalidf("switchyard: a reviewer name is required")
	}
	if err := c.checkClaim(ctx, id, reviewer); err != nil {
		return err
	}
	cur, err := c.l.Get(ctx, id)
	if err != nil {
		return err
	}
	// The resumed run is a new attempt in the ledger (its number one past
	// the parked one's) with a fresh retry budget on the broker, as a
	// task resumed after AwaitEvent: waiting for a reviewer is not
	// failing, so a task may be approved more times than it has attempts.
	t, err := c.l.Transition(ctx, ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.AwaitingReview}, To: ledger.Queued,
		Reason: "approved", Detail: note, Actor: "reviewer:" + reviewer, Attempt: cur.Attempt + 1, IfAttemptBelow: cur.Attempt + 1})
	if errors.Is(err, ledger.ErrConflict) {
		return fmt.Errorf("%w: %v", ErrNotAwaitingReview, err)
	}
	if err != nil {
		return err
	}
	rev, _ := json.Marshal(scheduler.Review{Approved: true, Reviewer: reviewer, Note: note})
	m := &broker.Message{ID: t.ID, Lane: t.Lane, Kind: t.Kind, Body: t.Args, Tenant: t.Tenant, OrderingKey: t.OrderingKey,
		MaxAttempts: t.MaxAttempts, Headers: map[string]string{scheduler.HeaderReview: string(rev)}}
	for k, v := range t.Metadata {
		m.Headers[metaPrefix+k] = v
	}
	if !t.Deadline.IsZero() {
		m.Headers[scheduler.HeaderDeadline] = t.Deadline.UTC().Format(time.RFC3339Nano)
	}
	if _, err := c.b.PublishOne(ctx, m); err != nil {
		// The task is queued in the ledger but not on the broker: put it
		// back so the approval can be retried.
		_, _ = c.l.Transition(context.WithoutCancel(ctx), ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Queued},
			To: ledger.AwaitingReview, Reason: "approval_not_published", Detail: err.Error(), Actor: "reviewer:" + reviewer})
		return err
	}
	return nil
}

// Reject ends the task with the reviewer's reason. A task claimed by
// another reviewer is refused with ErrClaimedByOther.
func (c *Client) Reject(ctx context.Context, id, reviewer, reason string) error {
	if c.l == nil {
		return ErrNoLedger
	}
	if reviewer == "" || reason == "" {
		return broker.Invalidf("switchyard: rejecting needs a reviewer and a reason")
	}
	if err := c.checkClaim(ctx, id, reviewer); err != nil {
		return err
	}
	msg := "rejected by " + reviewer + ": " + reason
	_, err := c.l.Transition(ctx, ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.AwaitingReview}, To: ledger.Rejected,
		Reason: "rejected", Detail: reason, Actor: "reviewer:" + reviewer, LastError: &msg})
	if errors.Is(err, ledger.ErrConflict) {
		return fmt.Errorf("%w: %v", ErrNotAwaitingReview, err)
	}
	return err
}

// ReplayDead moves up to max dead letters of lane (all, if max <= 0) back
// to the live lane and returns how many it moved. With a ledger, each task
// first goes from dead back to queued with a "replayed" event naming actor,
// so the runtime runs it again (with a fresh attempt budget; the ledger's
// attempt numbers continue, keeping the history).
func (c *Client) ReplayDead(ctx context.Context, lane string, max int, actor string) (int, error) {
	if err := broker.ValidateName("lane", lane); err != nil {
		return 0, err
	}
	if actor == "" {
		actor = "operator"
	}
	n := 0
	for max <= 0 || n < max {
		want := 100
		if max > 0 {
			want = min(want, max-n)
		}
		ds, err := c.b.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: want, Lease: time.Minute, DeadLetters: true})
		if err != nil {
			return n, err
		}
		if len(ds) == 0 {
			return n, nil
		}
		for _, d := range ds {
			if c.l != nil {
				t, err := c.l.Get(ctx, d.ID)
				switch {
				case errors.Is(err, ledger.ErrNotFound):
				case err != nil:
					return n, err
				case t.State == ledger.Dead || t.State == ledger.Failed:
					if _, err := c.l.Transition(ctx, ledger.TransitionRequest{ID: d.ID, From: []ledger.State{ledger.Dead, ledger.Failed},
						To: ledger.Queued, Reason: "replayed", Actor: actor, Attempt: t.Attempt + 1}); err != nil && !errors.Is(err, ledger.ErrConflict) {
						return n, err
					}
				}
			}
			if err := c.b.Replay(ctx, d); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}
