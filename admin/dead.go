package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
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
	// Max dead letters, oldest first; 0 means every match.
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
		broker.ReasonRejected, broker.ReasonBudget, broker.ReasonExpired, broker.ReasonDeliveryLimit}
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

// match reports whether dead letter d is selected by f within sc.
func (f *DeadFilter) match(sc Scope, d *broker.Delivery) bool {
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
	if len(f.IDs) > 0 && !slices.Contains(f.IDs, d.ID) {
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
	DeadAt                 time.Time
	Payload                []byte // the task's arguments (admin role only over HTTP)
}

func deadItem(d *broker.Delivery) DeadItem {
	it := DeadItem{ID: d.ID, Lane: d.Lane, Kind: d.Kind, Tenant: d.Tenant, Payload: d.Body}
	if dl := d.DeadLetter; dl != nil {
		it.Reason, it.Error, it.Attempts, it.DeadAt = dl.Reason, dl.Error, dl.Attempts, dl.At
	}
	return it
}

// leased is what a scan holds: every delivery it leased, to give back at the
// end unless an operation consumed it.
type leased struct {
	o    *Ops
	ds   []*broker.Delivery
	done map[*broker.Delivery]bool
}

// consumed marks d as settled by an operation: it is not given back.
func (l *leased) consumed(d *broker.Delivery) { l.done[d] = true }

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
			_ = r.Release(ctx, d, 0)
		} else {
			_ = drv.Nack(ctx, d, 0)
		}
	}
}

// scan leases the messages of lane (its dead-letter queue with dead) until
// the queue yields no more or stop says so, at most Config.MaxScan. The
// deliveries are added to l; the caller gives them back.
func (o *Ops) scan(ctx context.Context, l *leased, lane string, dead bool, stop func() bool) error {
	n, empties := 0, 0
	for n < o.cfg.MaxScan && (stop == nil || !stop()) {
		wait := time.Duration(0)
		if empties > 0 {
			wait = time.Second
		}
		ds, err := o.cfg.Broker.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: min(100, o.cfg.MaxScan-n), Lease: o.cfg.ScanLease, Wait: wait, DeadLetters: dead})
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			// Brokers that sample (SQS) may answer empty while messages
			// remain: look again (twice at most) when the counts say so.
			if empties >= 2 {
				return nil
			}
			st, err := o.cfg.Broker.Stats(ctx, lane)
			if err != nil {
				return err
			}
			left := st.Ready
			if dead {
				left = st.DeadLettered
			}
			if left <= int64(n) {
				return nil
			}
			empties++
			continue
		}
		empties = 0
		l.ds = append(l.ds, ds...)
		n += len(ds)
	}
	return nil
}

// scanDead leases the dead letters of the lanes f selects; the caller must
// give them back (l.giveBack).
func (o *Ops) scanDead(ctx context.Context, f *DeadFilter, stop func(l *leased) bool) (*leased, error) {
	l := &leased{o: o, done: map[*broker.Delivery]bool{}}
	if err := f.validate(); err != nil {
		return l, err
	}
	names, err := o.deadLanes(ctx, f.Lane)
	if err != nil {
		return l, err
	}
	for _, lane := range names {
		var st func() bool
		if stop != nil {
			st = func() bool { return stop(l) }
		}
		if err := o.scan(ctx, l, lane, true, st); err != nil {
			return l, fmt.Errorf("admin: dead letters of lane %s: %w", lane, err)
		}
		if stop != nil && stop(l) {
			break
		}
	}
	return l, nil
}

// DeadLetters lists dead letters without taking them out of their queue,
// lane by lane, at most f.Limit of them. Out-of-scope dead letters are left
// out; a filter naming another tenant than the scope's matches nothing.
func (o *Ops) DeadLetters(ctx context.Context, sc Scope, f DeadFilter) ([]DeadItem, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit == 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	out := []DeadItem{}
	if _, ok := sc.tenant(f.Tenant); !ok {
		return out, nil
	}
	seen := map[string]bool{}
	next := 0
	collect := func(l *leased) bool {
		for ; next < len(l.ds) && len(out) < limit; next++ {
			d := l.ds[next]
			if k := d.Lane + "\x00" + d.ID; f.match(sc, d) && !seen[k] {
				seen[k] = true
				out = append(out, deadItem(d))
			}
		}
		return len(out) >= limit
	}
	l, err := o.scanDead(ctx, &f, collect)
	defer l.giveBack(ctx)
	if err != nil {
		return nil, err
	}
	collect(l)
	return out, nil
}

// DeadLetter returns one dead letter by task ID; ledger.ErrNotFound when no
// dead-letter queue in scope holds it. lane "" looks in every lane.
func (o *Ops) DeadLetter(ctx context.Context, sc Scope, lane, id string) (*DeadItem, error) {
	if id == "" {
		return nil, broker.Invalidf("admin: empty task id")
	}
	f := DeadFilter{Lane: lane, IDs: []string{id}}
	var found *DeadItem
	next := 0
	look := func(l *leased) bool {
		for ; next < len(l.ds) && found == nil; next++ {
			if d := l.ds[next]; f.match(sc, d) {
				it := deadItem(d)
				found = &it
			}
		}
		return found != nil
	}
	l, err := o.scanDead(ctx, &f, look)
	defer l.giveBack(ctx)
	if err != nil {
		return nil, err
	}
	if look(l); found == nil {
		return nil, fmt.Errorf("dead letter %s: %w", id, ledger.ErrNotFound)
	}
	return found, nil
}

// Progress is called after each item of a bulk operation with how many are
// done and the total (total is -1 when unknown).
type Progress func(done, total int)

// Report is the outcome of a bulk operation.
type Report struct {
	Done   int
	Failed []ItemError
}

// ItemError is one item a bulk operation could not handle.
type ItemError struct {
	ID  string
	Err string
}

// bulk scans the dead letters f selects in sc, then calls act on each match
// (the first copy of each task; further copies of a task already handled
// are removed as duplicates), reporting progress. Everything else is given
// back. With f.IDs, an ID that no dead-letter queue in scope holds is
// reported as failed (not found).
func (o *Ops) bulk(ctx context.Context, sc Scope, f DeadFilter, p Progress, act func(ctx context.Context, d *broker.Delivery) error) (*Report, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	rep := &Report{Failed: []ItemError{}}
	if _, ok := sc.tenant(f.Tenant); !ok {
		return rep, nil
	}
	l, err := o.scanDead(ctx, &f, nil)
	defer l.giveBack(ctx)
	if err != nil {
		return nil, err
	}
	var work []*broker.Delivery
	var dups []*broker.Delivery
	picked := map[string]bool{}
	for _, d := range l.ds {
		if !f.match(sc, d) {
			continue
		}
		if picked[d.ID] {
			dups = append(dups, d)
			continue
		}
		if f.Max > 0 && len(work) == f.Max {
			continue
		}
		picked[d.ID] = true
		work = append(work, d)
	}
	total := len(work)
	missing := map[string]bool{}
	for _, id := range f.IDs {
		if !picked[id] && !missing[id] {
			missing[id] = true
			rep.Failed = append(rep.Failed, ItemError{ID: id, Err: fmt.Sprintf("no dead letter %s in scope", id)})
		}
	}
	for i, d := range work {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if err := act(ctx, d); err != nil {
			rep.Failed = append(rep.Failed, ItemError{ID: d.ID, Err: err.Error()})
		} else {
			l.consumed(d)
			rep.Done++
		}
		if p != nil {
			p(i+1, total)
		}
	}
	// Extra copies of a task handled above are duplicates: remove them.
	for _, d := range dups {
		for _, w := range work {
			if w.ID == d.ID && l.done[w] {
				if o.cfg.Broker.Ack(ctx, d) == nil {
					l.consumed(d)
				}
				break
			}
		}
	}
	return rep, nil
}

// Replay moves the selected dead letters back to their live lanes (their
// tasks back to queued, with a "replayed" event naming who).
func (o *Ops) Replay(ctx context.Context, sc Scope, f DeadFilter, who Actor, p Progress) (*Report, error) {
	return o.bulk(ctx, sc, f, p, func(ctx context.Context, d *broker.Delivery) error {
		revert, err := o.requeueTask(ctx, d.ID, "replayed", "", who)
		if err != nil {
			return err
		}
		if err := o.cfg.Broker.Replay(ctx, d); err != nil {
			revert("replay_failed", err)
			return err
		}
		return nil
	})
}

// requeueTask moves the ledger's task from dead (or failed) back to queued
// with an event naming who, as Client.ReplayDead does. A task the ledger
// does not know (or no ledger) is left alone. revert puts it back to dead if
// the broker side then fails.
func (o *Ops) requeueTask(ctx context.Context, id, reason, detail string, who Actor) (revert func(reason string, cause error), err error) {
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
		To: ledger.Queued, Reason: reason, Detail: detail, Actor: who.String(), Attempt: t.Attempt + 1}); err != nil && !errors.Is(err, ledger.ErrConflict) {
		return revert, err
	}
	return func(why string, cause error) {
		ctx := context.WithoutCancel(ctx)
		msg := t.LastError
		_, _ = L.Transition(ctx, ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Queued}, To: ledger.Dead,
			Reason: why, Detail: cause.Error(), Actor: who.String(), LastError: &msg})
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
// queued with a "moved" event naming who (the ledger keeps the task's
// original lane).
func (o *Ops) Move(ctx context.Context, sc Scope, f DeadFilter, toLane string, who Actor, p Progress) (*Report, error) {
	if err := broker.ValidateName("target lane", toLane); err != nil {
		return nil, err
	}
	return o.bulk(ctx, sc, f, p, func(ctx context.Context, d *broker.Delivery) error {
		revert, err := o.requeueTask(ctx, d.ID, "moved", "from lane "+d.Lane+" to lane "+toLane, who)
		if err != nil {
			return err
		}
		if _, err := o.cfg.Broker.PublishOne(ctx, movedCopy(d, toLane)); err != nil {
			revert("move_failed", err)
			return err
		}
		if err := o.cfg.Broker.Ack(ctx, d); err != nil {
			// Published but still in the dead-letter queue: a later move
			// or purge removes it; the task runs from its new lane.
			return fmt.Errorf("moved, but not removed from the dead-letter queue: %w", err)
		}
		return nil
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

// Peek returns up to n ready messages of lane (default 10, at most 1000)
// without taking them or spending an attempt. A scoped caller sees its own
// tenant's only.
//
// Peek leases the messages for a moment and gives them back with
// broker.Broker.Release: where the driver has no native release, that
// re-publishes them (same ID, same attempt count), so they move to the back
// of the lane.
func (o *Ops) Peek(ctx context.Context, sc Scope, lane string, n int) ([]*broker.Message, error) {
	if err := broker.ValidateName("lane", lane); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, broker.Invalidf("admin: negative count %d", n)
	}
	if n == 0 {
		n = 10
	}
	n = min(n, 1000)
	out := []*broker.Message{}
	l := &leased{o: o, done: map[*broker.Delivery]bool{}}
	defer l.giveBack(ctx)
	next := 0
	collect := func() bool {
		for ; next < len(l.ds) && len(out) < n; next++ {
			if d := l.ds[next]; sc.allows(d.Tenant) {
				out = append(out, d.Message.Clone())
			}
		}
		return len(out) >= n
	}
	if err := o.scan(ctx, l, lane, false, collect); err != nil {
		return nil, err
	}
	collect()
	return out, nil
}
