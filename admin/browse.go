package admin

import (
	"context"
	"fmt"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// browsePage is the page size listings and peeks read with.
const browsePage = 500

// ReadMode says how a listing or a peek read its queue.
type ReadMode string

const (
	// ReadBrowse: the broker read the queue without leasing anything
	// (broker.Browser): order, attempts and age are untouched, and a
	// concurrent reader sees the same messages.
	ReadBrowse ReadMode = "browse"
	// ReadLease: the broker cannot read a queue without leasing it
	// (RabbitMQ, SQS): the messages were leased for a moment and given
	// back without spending an attempt. On such brokers that may move them
	// to the back of the lane and reset their age, and a concurrent
	// reader sees fewer of them meanwhile.
	ReadLease ReadMode = "lease"
)

// PeekResult is what a peek saw.
type PeekResult struct {
	Messages []*broker.Message
	Mode     ReadMode
	// Truncated: a scoped peek stopped after looking at Config.MaxScan
	// messages of other tenants; more of the caller's may be further on.
	Truncated bool
}

// DeadListing is one listing of dead letters.
type DeadListing struct {
	Items []DeadItem
	Mode  ReadMode
	// More: the listing stopped at its limit with dead letters left
	// unseen (ask for a larger limit or a narrower filter).
	More bool
	// Truncated: a scan by leasing stopped at Config.MaxScan dead letters
	// in some lane without reaching the end; dead letters beyond were not
	// looked at. Never set with ReadBrowse, which reads to the end.
	Truncated bool
}

// browseLane reads lane (its dead letters with dead) page by page and calls
// each with every message until each returns false or the queue ends;
// ok=false when the broker cannot browse it (nothing was read).
func (o *Ops) browseLane(ctx context.Context, lane string, dead bool, each func(*broker.Delivery) bool) (ok bool, err error) {
	B := o.cfg.Broker
	if !B.CanBrowse() {
		return false, nil
	}
	after := ""
	for {
		p, err := B.Browse(ctx, broker.BrowseRequest{Lane: lane, DeadLetters: dead, Max: browsePage, After: after})
		if isUnsupported(err) && after == "" {
			return false, nil
		}
		if err != nil {
			return true, err
		}
		for _, d := range p.Messages {
			if !each(d) {
				return true, nil
			}
		}
		if p.Next == "" || p.Next == after {
			return true, nil
		}
		after = p.Next
	}
}

// Peek returns up to n ready messages of lane (default 10, at most 1000)
// without taking them or spending an attempt; see PeekLane.
func (o *Ops) Peek(ctx context.Context, sc Scope, lane string, n int) ([]*broker.Message, error) {
	r, err := o.PeekLane(ctx, sc, lane, n)
	if err != nil {
		return nil, err
	}
	return r.Messages, nil
}

// PeekLane returns up to n ready messages of lane (default 10, at most
// 1000) in the order the lane delivers them, without taking them or
// spending an attempt, and says how it read them. Where the broker can
// browse (broker.Browser) nothing in the queue changes. Elsewhere it
// leases at most n messages and gives them back with
// broker.Broker.Release (Mode ReadLease): where the driver has no native
// release, that re-publishes them (same ID, same attempt count), so they
// move to the back of the lane. A scoped caller sees its own tenant's
// only (by leasing: among the n leased).
func (o *Ops) PeekLane(ctx context.Context, sc Scope, lane string, n int) (*PeekResult, error) {
	if err := o.knownLane(ctx, lane); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, broker.Invalidf("admin: negative count %d", n)
	}
	if n == 0 {
		n = 10
	}
	n = min(n, 1000)
	res := &PeekResult{Messages: []*broker.Message{}, Mode: ReadBrowse}
	looked := 0
	ok, err := o.browseLane(ctx, lane, false, func(d *broker.Delivery) bool {
		looked++
		if sc.allows(d.Tenant) {
			res.Messages = append(res.Messages, d.Message.Clone())
		}
		if len(res.Messages) >= n {
			return false
		}
		if looked >= o.cfg.MaxScan {
			res.Truncated = true
			return false
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if ok {
		return res, nil
	}
	res.Mode = ReadLease
	l := o.newLeased()
	defer l.giveBack(ctx)
	if _, err := o.scan(ctx, l, lane, false, n, nil); err != nil {
		return nil, err
	}
	for _, d := range l.ds {
		if sc.allows(d.Tenant) {
			res.Messages = append(res.Messages, d.Message.Clone())
		}
	}
	return res, nil
}

// DeadLetters lists dead letters without taking them out of their queue,
// lane by lane, at most f.Limit of them; see DeadList.
func (o *Ops) DeadLetters(ctx context.Context, sc Scope, f DeadFilter) ([]DeadItem, error) {
	l, err := o.DeadList(ctx, sc, f)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// DeadList lists dead letters without taking them out of their queue, lane
// by lane, at most f.Limit of them (default 50, at most 1000), and says how
// it read them and whether it stopped early. Out-of-scope dead letters are
// left out; a filter naming another tenant than the scope's matches
// nothing. Where the broker can browse, the listing reads every dead
// letter it needs and nothing changes (a concurrent listing sees the
// same); elsewhere it leases them in batches and gives them back (Mode
// ReadLease), holding at most Config.MaxScan per lane (Truncated).
func (o *Ops) DeadList(ctx context.Context, sc Scope, f DeadFilter) (*DeadListing, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	if f.Lane != "" {
		if err := o.knownLane(ctx, f.Lane); err != nil {
			return nil, err
		}
	}
	limit := f.Limit
	if limit == 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	res := &DeadListing{Items: []DeadItem{}, Mode: ReadBrowse}
	if _, ok := sc.tenant(f.Tenant); !ok {
		return res, nil
	}
	ids := f.idSet()
	seen := map[string]bool{}
	stop := false
	add := func(d *broker.Delivery) bool {
		if k := d.Lane + "\x00" + d.ID; f.match(sc, ids, d) && !seen[k] {
			if len(res.Items) >= limit {
				res.More, stop = true, true
				return false
			}
			seen[k] = true
			res.Items = append(res.Items, deadItem(d))
			if ids != nil && len(res.Items) >= len(ids) {
				stop = true // every ID asked for is found
				return false
			}
		}
		return true
	}
	names, err := o.deadLanes(ctx, f.Lane)
	if err != nil {
		return nil, err
	}
	var leaseLanes []string
	for _, lane := range names {
		ok, err := o.browseLane(ctx, lane, true, add)
		if err != nil {
			return nil, fmt.Errorf("admin: dead letters of lane %s: %w", lane, err)
		}
		if !ok {
			leaseLanes = append(leaseLanes, lane)
		}
		if stop {
			return res, nil
		}
	}
	for _, lane := range leaseLanes {
		res.Mode = ReadLease
		lf := f
		lf.Lane = lane
		tr, err := o.eachDead(ctx, &lf, func(_ *leased, b []*broker.Delivery) bool {
			for _, d := range b {
				if !add(d) {
					return false
				}
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		res.Truncated = res.Truncated || tr
		if stop {
			break
		}
	}
	return res, nil
}

// DeadLetter returns one dead letter by task ID; ledger.ErrNotFound when no
// dead-letter queue in scope holds it. lane "" looks in every lane.
func (o *Ops) DeadLetter(ctx context.Context, sc Scope, lane, id string) (*DeadItem, error) {
	if id == "" {
		return nil, broker.Invalidf("admin: empty task id")
	}
	l, err := o.DeadList(ctx, sc, DeadFilter{Lane: lane, IDs: []string{id}, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(l.Items) == 0 {
		if l.Truncated {
			return nil, fmt.Errorf("dead letter %s not found among the dead letters looked at (the scan stopped at Config.MaxScan): %w", id, ledger.ErrNotFound)
		}
		return nil, fmt.Errorf("dead letter %s: %w", id, ledger.ErrNotFound)
	}
	return &l.Items[0], nil
}
