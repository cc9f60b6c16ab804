package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// DeadFilter selects dead letters. Empty fields match everything.
type DeadFilter struct {
	Lane   string // "" = every lane
	Kind   string
	Tenant string
	Reason broker.Reason
	IDs    []string // when set, only these
	Limit  int      // default 50, at most 1000 (listing only)
	// Max bounds a bulk operation (Replay, Move, Purge): it acts on at most
	// Max dead letters, in the order the dead-letter queues yield them,
	// lane by lane (not necessarily oldest first); 0 means every match.
	Max int
}

func (f *DeadFilter) validate() error {
	if f.Kind != "" {
		if err := broker.ValidateName("kind", f.Kind); err != nil {
			return err
		}
	}
	if f.Reason != "" && !knownReason(f.Reason) {
		return broker.Invalidf("admin: unknown dead-letter reason %q (want one of %s)", f.Reason, reasonNames())
	}
	for _, id := range f.IDs {
		if id == "" {
			return broker.Invalidf("admin: empty task id in the filter")
		}
	}
	if f.Limit < 0 || f.Max < 0 {
		return broker.Invalidf("admin: negative limit")
	}
	return nil
}

// Reasons lists the dead-letter reasons the framework and drivers use.
func Reasons() []broker.Reason {
	return []broker.Reason{broker.ReasonMaxAttempts, broker.ReasonPermanent, broker.ReasonUndecodable, broker.ReasonUnknownKind,
		broker.ReasonRejected, broker.ReasonBudget, broker.ReasonExpired, broker.ReasonDeliveryLimit, broker.ReasonBadSequence}
}

func knownReason(r broker.Reason) bool { return slices.Contains(Reasons(), r) }

func reasonNames() string {
	s := ""
	for i, r := range Reasons() {
		if i > 0 {
			s += ", "
		}
		s += string(r)
	}
	return s
}

// idSet is f.IDs as a set (nil when f has none).
func (f *DeadFilter) idSet() map[string]bool {
	if len(f.IDs) == 0 {
		return nil
	}
	s := make(map[string]bool, len(f.IDs))
	for _, id := range f.IDs {
		s[id] = true
	}
	return s
}

// match reports whether dead letter d is selected by f within sc; ids is
// the set of IDs to match (f.idSet(), or a subset of it), nil for any.
func (f *DeadFilter) match(sc Scope, ids map[string]bool, d *broker.Delivery) bool {
	if !sc.allows(d.Tenant) {
		return false
	}
	if f.Tenant != "" && d.Tenant != f.Tenant {
		return false
	}
	if f.Kind != "" && d.Kind != f.Kind {
		return false
	}
	if f.Reason != "" && (d.DeadLetter == nil || d.DeadLetter.Reason != f.Reason) {
		return false
	}
	if ids != nil && !ids[d.ID] {
		return false
	}
	return true
}

// DeadItem is a dead letter: the message, why it died and its attempts.
type DeadItem struct {
	ID, Lane, Kind, Tenant string
	Reason                 broker.Reason
	Error                  string
	Attempts               []broker.AttemptRecord
	// AttemptsMade is how many attempts the task had: the highest attempt
	// number its history or its broker records. Without a ledger the
	// history may hold the last attempt only, so count this, not
	// len(Attempts).
	AttemptsMade int
	// SandboxOf is set on the dead letter of a sandbox replay: the ID of
	// the dead letter it is a copy of (its effects were never performed).
	SandboxOf string
	DeadAt    time.Time
	Payload   []byte // the task's arguments (admin role only over HTTP)
}

func deadItem(d *broker.Delivery) DeadItem {
	it := DeadItem{ID: d.ID, Lane: d.Lane, Kind: d.Kind, Tenant: d.Tenant, Payload: d.Body}
	if dl := d.DeadLetter; dl != nil {
		it.Reason, it.Error, it.Attempts, it.DeadAt = dl.Reason, dl.Error, dl.Attempts, dl.At
	}
	it.SandboxOf = d.Headers[scheduler.HeaderSandbox]
	it.AttemptsMade = max(d.Attempt, len(it.Attempts))
	for _, a := range it.Attempts {
		it.AttemptsMade = max(it.AttemptsMade, a.Attempt)
	}
	return it
}

// leased is what a scan holds: every delivery it leased, to give back at the
// end unless an operation consumed it, with when each lease runs out.
type leased struct {
	o     *Ops
	lease time.Duration // the lease taken and renewed (ScanLease, capped by the broker)
	ds    []*broker.Delivery
	done  map[*broker.Delivery]bool      // consumed, or lost: never given back
	lost  map[*broker.Delivery]bool      // lease lost (renewal refused): not ours
	until map[*broker.Delivery]time.Time // when the lease runs out, at the latest
	// first is no later than the earliest until of a held delivery (it
	// may be earlier: consumed ones are not taken out).
	first time.Time
}

func (o *Ops) newLeased() *leased {
	lease := o.cfg.ScanLease
	if ml := o.cfg.Broker.Capabilities().MaxLease; ml > 0 && lease > ml {
		lease = ml
	}
	return &leased{o: o, lease: lease, done: map[*broker.Delivery]bool{}, lost: map[*broker.Delivery]bool{},
		until: map[*broker.Delivery]time.Time{}}
}

// add records deliveries received with a lease taken at or after since.
func (l *leased) add(since time.Time, ds []*broker.Delivery) {
	for _, d := range ds {
		l.ds = append(l.ds, d)
		l.until[d] = since.Add(l.lease)
	}
	if u := since.Add(l.lease); len(ds) > 0 && (l.first.IsZero() || u.Before(l.first)) {
		l.first = u
	}
}

// consumed marks d as settled by an operation: it is not given back.
func (l *leased) consumed(d *broker.Delivery) { l.done[d] = true }

// held counts the deliveries still held (neither consumed nor lost).
func (l *leased) held() int {
	n := 0
	for _, d := range l.ds {
		if !l.done[d] {
			n++
		}
	}
	return n
}

// keepAlive renews the leases of every held delivery once the first of them
// is past half its lease, so that a long scan or bulk run never acts on (or
// gives back) a message whose lease has run out. A delivery whose renewal
// the broker refuses is marked lost: it is neither acted on nor given back.
func (l *leased) keepAlive(ctx context.Context) {
	now := l.o.now()
	if l.first.IsZero() || l.first.Sub(now) >= l.lease/2 {
		return
	}
	var hold []*broker.Delivery
	for _, d := range l.ds {
		if !l.done[d] {
			hold = append(hold, d)
		}
	}
	l.first = now.Add(l.lease)
	if len(hold) == 0 {
		return
	}
	B := l.o.cfg.Broker
	if err := B.Extend(ctx, l.lease, hold...); err == nil {
		for _, d := range hold {
			l.until[d] = now.Add(l.lease)
		}
		return
	}
	// One at a time, to find out which leases are gone.
	for _, d := range hold {
		if err := B.Extend(ctx, l.lease, d); err != nil {
			l.done[d], l.lost[d] = true, true
			continue
		}
		l.until[d] = now.Add(l.lease)
	}
}

// usable reports whether d may still be acted on: held, with at least a
// quarter of its lease left.
func (l *leased) usable(d *broker.Delivery) bool {
	return !l.done[d] && l.until[d].Sub(l.o.now()) >= l.lease/4
}

// giveBack returns every delivery not consumed, without spending an
// attempt where the driver can (dead-letter deliveries count none anyway).
func (l *leased) giveBack(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	drv := l.o.cfg.Broker.Driver()
	for _, d := range l.ds {
		if l.done[d] {
			continue
		}
		if d.DeadLetter == nil {
			// A live delivery from Peek: the broker's Release keeps its
			// ordering bookkeeping right.
			_ = l.o.cfg.Broker.Release(ctx, d, 0)
		} else if r, ok := drv.(broker.Releaser); ok {
			// Wire: the body as stored (sealed, with a codec), never the
			// plaintext Broker opened.
			_ = r.Release(ctx, broker.Wire(d), 0)
		} else {
			_ = drv.Nack(ctx, broker.Wire(d), 0)
		}
	}
	l.ds = nil
}

// scan leases the messages of lane (its dead-letter queue with dead) in
// batches and calls each with every batch, until the queue yields no more,
// each returns false, or l holds max deliveries (consumed ones do not
// count). It renews the held leases as it goes. truncated reports that it
// stopped at max with messages perhaps left unseen. The caller gives l back.
func (o *Ops) scan(ctx context.Context, l *leased, lane string, dead bool, max int, each func([]*broker.Delivery) bool) (truncated bool, err error) {
	empties := 0
	for {
		held := l.held()
		if held >= max {
			return true, nil
		}
		l.keepAlive(ctx)
		wait := time.Duration(0)
		if empties > 0 {
			wait = time.Second
		}
		since := o.now()
		ds, err := o.cfg.Broker.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: min(100, max-held), Lease: l.lease, Wait: wait, DeadLetters: dead})
		if err != nil {
			return false, err
		}
		if len(ds) == 0 {
			// Brokers that sample (SQS) may answer empty while messages
			// remain: look again (twice at most) when the counts say so.
			if empties >= 2 {
				return false, nil
			}
			st, err := o.cfg.Broker.Stats(ctx, lane)
			if err != nil {
				return false, err
			}
			left := st.Ready
			if dead {
				left = st.DeadLettered
			}
			if left <= int64(held) {
				return false, nil
			}
			empties++
			continue
		}
		empties = 0
		l.add(since, ds)
		if each != nil && !each(ds) {
			return false, nil
		}
	}
}

// eachDead scans the dead letters of the lanes f selects, one lane at a
// time: it calls each with every batch, and gives the lane's letters back
// (those not consumed) before it moves on to the next lane. truncated
// reports that some lane's scan stopped at Config.MaxScan.
func (o *Ops) eachDead(ctx context.Context, f *DeadFilter, each func(l *leased, batch []*broker.Delivery) bool) (truncated bool, err error) {
	names, err := o.deadLanes(ctx, f.Lane)
	if err != nil {
		return false, err
	}
	for _, lane := range names {
		l := o.newLeased()
		more := true
		tr, err := o.scan(ctx, l, lane, true, o.cfg.MaxScan, func(b []*broker.Delivery) bool {
			more = each(l, b)
			return more
		})
		l.giveBack(ctx)
		if err != nil {
			return truncated, fmt.Errorf("admin: dead letters of lane %s: %w", lane, err)
		}
		truncated = truncated || tr
		if !more {
			break
		}
	}
	return truncated, nil
}

// Progress is called after each item of a bulk operation with how many are
// done and the total: the number of IDs (capped by Max) for an operation by
// IDs, -1 (unknown) for one by filter, which acts as it scans.
type Progress func(done, total int)

// Report is the outcome of a bulk operation.
type Report struct {
	Done   int
	Failed []ItemError
	// Truncated reports that the scan of some lane stopped after holding
	// Config.MaxScan dead letters that it did not act on (they did not
	// match, or failed): dead letters beyond them were not looked at, so
	// more may match. Run the operation again, with a narrower filter or a
	// larger MaxScan.
	Truncated bool
}

// ItemError is one item a bulk operation could not handle.
type ItemError struct {
	ID  string
	Err string
}

// actTimeout bounds one item of a bulk operation once it has started. An
// item runs to completion (or this timeout) even when the caller's context
// is cancelled, so a client that goes away between a publish and the
// removal that follows it does not leave a copy in both queues.
const actTimeout = 30 * time.Second

// missingRetries is how many times a bulk operation by IDs scans again for
// IDs it did not find (a concurrent listing may hold them for a moment).
const missingRetries = 2

// bulk acts on the dead letters f selects in sc, lane by lane and batch by
// batch as the queues yield them: each match (the first copy of each task;
// further copies of a task already handled are removed as duplicates) is
// acted on at once, while its lease is fresh; the rest is given back when
// the lane is done. The held leases are renewed as the run goes on. With
// f.IDs, IDs not found are looked for again (up to missingRetries more
// scans), then reported as failed.
func (o *Ops) bulk(ctx context.Context, sc Scope, f DeadFilter, p Progress, act func(ctx context.Context, d *broker.Delivery) error) (*Report, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	if f.Lane != "" {
		if err := o.knownLane(ctx, f.Lane); err != nil {
			return nil, err
		}
	}
	rep := &Report{Failed: []ItemError{}}
	if _, ok := sc.tenant(f.Tenant); !ok {
		return rep, nil
	}
	total := -1
	ids := f.idSet()
	if len(ids) > 0 {
		total = len(ids)
		if f.Max > 0 {
			total = min(total, f.Max)
		}
	}
	picked := map[string]bool{}  // tasks acted on (or tried)
	handled := map[string]bool{} // tasks acted on successfully
	tried := 0
	full := func() bool { return f.Max > 0 && tried >= f.Max }
	pass := func(want map[string]bool) (bool, error) {
		return o.eachDead(ctx, &f, func(l *leased, b []*broker.Delivery) bool {
			for _, d := range b {
				if ctx.Err() != nil {
					return false
				}
				if !f.match(sc, want, d) {
					continue
				}
				if picked[d.ID] {
					if handled[d.ID] {
						// An extra copy of a task handled above: remove it.
						actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actTimeout)
						if o.cfg.Broker.Ack(actx, d) == nil {
							l.consumed(d)
						}
						cancel()
					}
					continue
				}
				if full() {
					return false
				}
				l.keepAlive(ctx)
				picked[d.ID] = true
				tried++
				if !l.usable(d) {
					rep.Failed = append(rep.Failed, ItemError{ID: d.ID, Err: "its lease ran out before it could be handled; nothing done, try again"})
				} else {
					actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actTimeout)
					err := act(actx, d)
					cancel()
					if err != nil {
						rep.Failed = append(rep.Failed, ItemError{ID: d.ID, Err: err.Error()})
					} else {
						l.consumed(d)
						handled[d.ID] = true
						rep.Done++
					}
				}
				if p != nil {
					p(tried, total)
				}
			}
			return !full()
		})
	}
	tr, err := pass(ids)
	rep.Truncated = tr
	for retry := 0; err == nil && len(ids) > 0 && !full() && !tr && retry < missingRetries; retry++ {
		missing := map[string]bool{}
		for id := range ids {
			if !picked[id] {
				missing[id] = true
			}
		}
		if len(missing) == 0 {
			break
		}
		if err := o.sleep(ctx, time.Duration(retry+1)*500*time.Millisecond); err != nil {
			return rep, err
		}
		tr, err = pass(missing)
		rep.Truncated = rep.Truncated || tr
	}
	if err != nil {
		return rep, err
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if !full() {
		reported := map[string]bool{}
		for _, id := range f.IDs {
			if picked[id] || reported[id] {
				continue
			}
			reported[id] = true
			msg := fmt.Sprintf("no dead letter %s in scope", id)
			if rep.Truncated {
				msg = fmt.Sprintf("dead letter %s not found among the dead letters looked at (the scan stopped at Config.MaxScan)", id)
			}
			rep.Failed = append(rep.Failed, ItemError{ID: id, Err: msg})
		}
	}
	return rep, nil
}

// Replay moves the selected dead letters back to their live lanes (their
// tasks back to queued, with a "replayed" event naming who), through
// broker.Broker.Replay. When the broker refuses the replay outright
// (invalid, unsupported, closed), the task goes back to dead in the ledger.
// Any other failure may have come after the copy was published (a publish
// then a removal), so the task is left queued rather than risk sending a
// replayed copy to a task the ledger calls dead: the item is reported
// failed, and the dead letter, if still there, can be replayed again.
func (o *Ops) Replay(ctx context.Context, sc Scope, f DeadFilter, who Actor, p Progress) (*Report, error) {
	return o.bulk(ctx, sc, f, p, func(ctx context.Context, d *broker.Delivery) error {
		revert, err := o.requeueTask(ctx, d.ID, "replayed", "", "", who)
		if err != nil {
			return err
		}
		if err := o.cfg.Broker.Replay(ctx, d); err != nil {
			if nothingPublished(err) {
				revert("replay_failed", err)
				return err
			}
			return fmt.Errorf("replay failed, perhaps after publishing (the task is left queued; replay it again if it is still a dead letter): %w", err)
		}
		return nil
	})
}

// nothingPublished reports whether err is a refusal that happens before
// anything is published.
func nothingPublished(err error) bool {
	return errors.Is(err, broker.ErrInvalid) || errors.Is(err, broker.ErrUnsupported) || errors.Is(err, broker.ErrClosed) ||
		errors.Is(err, broker.ErrTooLarge)
}

// removeDead acks dead letter d after a copy of it was published (trying
// twice); the error says the copy went out.
func (o *Ops) removeDead(ctx context.Context, d *broker.Delivery, verb string) error {
	err := o.cfg.Broker.Ack(ctx, d)
	if err != nil && !errors.Is(err, broker.ErrLeaseLost) && ctx.Err() == nil {
		err = o.cfg.Broker.Ack(ctx, d)
	}
	if err != nil {
		// Published but still in the dead-letter queue: a later purge
		// (by ID) removes it; the task runs from its live lane.
		return fmt.Errorf("%s, but not removed from the dead-letter queue (purge it by ID): %w", verb, err)
	}
	return nil
}

// requeueTask moves the ledger's task from dead (or failed) back to queued
// with an event naming who, as Client.ReplayDead does. A task the ledger
// does not know (or no ledger) is left alone. A non-empty lane moves the
// task to that lane with the transition. revert puts it back to dead (in
// its old lane) if the broker side then fails.
func (o *Ops) requeueTask(ctx context.Context, id, reason, detail, lane string, who Actor) (revert func(reason string, cause error), err error) {
	revert = func(string, error) {}
	L := o.cfg.Ledger
	if L == nil {
		return revert, nil
	}
	t, err := L.Get(ctx, id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return revert, nil
	case err != nil:
		return revert, err
	case t.State != ledger.Dead && t.State != ledger.Failed:
		// Already queued again (or running): the broker side still
		// needs doing; record who did it.
		return revert, L.AppendEvent(ctx, ledger.Event{TaskID: id, At: time.Now(), Reason: reason, Detail: detail, Actor: who.String()})
	}
	if _, err := L.Transition(ctx, ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Dead, ledger.Failed},
		To: ledger.Queued, Reason: reason, Detail: detail, Actor: who.String(), Attempt: t.Attempt + 1, Lane: lane}); err != nil && !errors.Is(err, ledger.ErrConflict) {
		return revert, err
	}
	return func(why string, cause error) {
		ctx := context.WithoutCancel(ctx)
		msg := t.LastError
		back := ""
		if lane != "" {
			back = t.Lane // the move did not happen: the task stays in its lane
		}
		_, _ = L.Transition(ctx, ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Queued}, To: ledger.Dead,
			Reason: why, Detail: cause.Error(), Actor: who.String(), LastError: &msg, Lane: back})
	}, nil
}

// ReplaySandbox runs a copy of dead letter id in sandbox mode: the task
// runs, its steps run, but its effects are recorded as "would do" instead
// of executed. The dead letter stays where it is. It returns the sandbox
// task's ID.
func (o *Ops) ReplaySandbox(ctx context.Context, sc Scope, lane, id string, who Actor) (string, error) {
	if o.cfg.Ledger == nil {
		return "", ErrNoLedger
	}
	it, err := o.DeadLetter(ctx, sc, lane, id)
	if err != nil {
		return "", err
	}
	return o.replaySandbox(ctx, it.Lane, id, who)
}

// Move moves the selected dead letters to lane toLane's live queue: each is
// published there as a fresh message keeping its ID, kind, tenant, keys,
// arguments and metadata, then removed from its dead-letter queue (only once
// the publish is confirmed). With a ledger, its task goes from dead to
// queued in lane toLane with a "moved" event naming who (the event keeps
// the lane it came from).
func (o *Ops) Move(ctx context.Context, sc Scope, f DeadFilter, toLane string, who Actor, p Progress) (*Report, error) {
	if err := o.knownLane(ctx, toLane); err != nil {
		return nil, fmt.Errorf("target lane: %w", err)
	}
	return o.bulk(ctx, sc, f, p, func(ctx context.Context, d *broker.Delivery) error {
		if d.Lane == toLane {
			// A copy published next to the dead letter it is would be
			// taken for it by some brokers (same ID): that is a replay.
			return fmt.Errorf("already a dead letter of lane %s: replay it instead", toLane)
		}
		revert, err := o.requeueTask(ctx, d.ID, "moved", "from lane "+d.Lane+" to lane "+toLane, toLane, who)
		if err != nil {
			return err
		}
		if _, err := o.cfg.Broker.PublishOne(ctx, movedCopy(d, toLane)); err != nil {
			if !errors.Is(err, broker.ErrUnknownOutcome) {
				revert("move_failed", err)
			}
			return err
		}
		return o.removeDead(ctx, d, "moved")
	})
}

// movedCopy is the fresh message Move publishes for dead letter d.
func movedCopy(d *broker.Delivery, lane string) *broker.Message {
	m := &broker.Message{ID: d.ID, Lane: lane, Kind: d.Kind, Body: d.Body, Tenant: d.Tenant, OrderingKey: d.OrderingKey,
		MaxAttempts: d.MaxAttempts}
	key := d.IdempotencyKey
	if d.Headers != nil {
		m.Headers = map[string]string{}
		for k, v := range d.Headers {
			m.Headers[k] = v
		}
		if k := m.Headers[broker.HeaderHeldKey]; k != "" && key == "" {
			key = k
		}
		for _, h := range []string{broker.HeaderHoldUntil, broker.HeaderAttemptBase, broker.HeaderHeldKey, broker.HeaderRunAt, broker.HeaderOrderSeq} {
			delete(m.Headers, h)
		}
	}
	if key != "" {
		// The copy keeps its key but must not be deduplicated against the
		// message it is: the broker restores a held key on delivery.
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[broker.HeaderHeldKey] = key
	}
	if len(m.Headers) == 0 {
		m.Headers = nil
	}
	return m
}

// Purge deletes the selected dead letters for good (their tasks stay dead
// in the ledger, with a "purged" event).
func (o *Ops) Purge(ctx context.Context, sc Scope, f DeadFilter, who Actor, p Progress) (*Report, error) {
	return o.bulk(ctx, sc, f, p, func(ctx context.Context, d *broker.Delivery) error {
		if err := o.cfg.Broker.Ack(ctx, d); err != nil {
			return err
		}
		if L := o.cfg.Ledger; L != nil {
			err := L.AppendEvent(ctx, ledger.Event{TaskID: d.ID, At: time.Now(), Reason: "purged",
				Detail: "removed from the dead-letter queue of lane " + d.Lane, Actor: who.String()})
			if err != nil && !errors.Is(err, ledger.ErrNotFound) {
				return fmt.Errorf("purged, but the event was not recorded: %w", err)
			}
		}
		return nil
	})
}
