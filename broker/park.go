package broker

import (
	"context"
	"sync"
	"time"
)

// Parking. On a broker without native ordering, a keyed message whose turn
// has not come is given back to the broker with a delay (requeue), which
// puts it at the back of the lane's queue: behind thousands of others it
// may come round long after its turn. So the message next in line for its
// key (SequencerPosition says it is first) is kept here instead, leased,
// and asked about again every parkPoll — at once when this process
// finishes the key's running message — and handed to the next Receive of
// its lane when its turn comes. It stays at most parkMax (and a third of
// its lease), then goes back to the broker as before — a goroutine gives
// back the ones whose time is up even while nobody calls Receive (all
// slots busy); a process that dies with parked messages loses nothing
// (their leases end and the broker redelivers them).

const (
	parkMax   = 2 * time.Second
	parkPoll  = 25 * time.Millisecond
	parkLimit = 256 // parked messages per lane and Broker
)

type parkedMsg struct {
	d        *Delivery
	seq      int64
	next     time.Time // when to ask the sequencer again
	deadline time.Time // when to give it back to the broker
}

type parkLot struct {
	mu      sync.Mutex
	lanes   map[string][]*parkedMsg
	reaping bool // the give-back goroutine runs
}

// add parks d unless its lane is full or its lease is too short, and
// starts b's give-back goroutine when it is not running.
func (b *Broker) parkAdd(d *Delivery, seq int64, now time.Time) bool {
	p := &b.park
	deadline := now.Add(min(parkMax, time.Until(d.LeaseDeadline)/3))
	if deadline.Sub(now) < 2*parkPoll {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lanes == nil {
		p.lanes = map[string][]*parkedMsg{}
	}
	if len(p.lanes[d.Lane]) >= parkLimit {
		return false
	}
	p.lanes[d.Lane] = append(p.lanes[d.Lane], &parkedMsg{d: d, seq: seq, next: now.Add(parkPoll), deadline: deadline})
	if !p.reaping {
		p.reaping = true
		go b.reapParked()
	}
	return true
}

// reapParked gives back to the broker the parked messages whose time is
// up, every parkPoll, until none is parked (or b closes).
func (b *Broker) reapParked() {
	t := time.NewTicker(parkPoll)
	defer t.Stop()
	for range t.C {
		now := time.Now()
		var expired []*parkedMsg
		b.park.mu.Lock()
		empty := true
		for lane, all := range b.park.lanes {
			keep := all[:0]
			for _, m := range all {
				if now.Before(m.deadline) {
					keep = append(keep, m)
				} else {
					expired = append(expired, m)
				}
			}
			clear(all[len(keep):])
			b.park.lanes[lane] = keep
			empty = empty && len(keep) == 0
		}
		closed := b.closed.Load()
		if empty || closed {
			b.park.reaping = false
		}
		b.park.mu.Unlock()
		if closed {
			return // their leases end and the broker redelivers them
		}
		for _, m := range expired {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := b.requeue(ctx, m.d, b.opts.OrderingRetry); err != nil {
				b.opts.Logger.Warn("switchyard: a parked keyed message could not be given back; it returns after its lease",
					"lane", m.d.Lane, "id", m.d.ID, "error", err)
			}
			cancel()
		}
		if empty {
			return
		}
	}
}

// has reports whether lane has parked messages.
func (p *parkLot) has(lane string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lanes[lane]) > 0
}

// due takes lane's parked messages whose time to ask has come, at most max.
func (p *parkLot) due(lane string, now time.Time, max int) []*parkedMsg {
	p.mu.Lock()
	defer p.mu.Unlock()
	all := p.lanes[lane]
	var out []*parkedMsg
	keep := all[:0]
	for _, m := range all {
		if len(out) < max && !now.Before(m.next) {
			out = append(out, m)
		} else {
			keep = append(keep, m)
		}
	}
	clear(all[len(keep):])
	p.lanes[lane] = keep
	return out
}

// putBack parks m again.
func (p *parkLot) putBack(m *parkedMsg) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lanes[m.d.Lane] = append(p.lanes[m.d.Lane], m)
}

// poke makes the parked messages of (lane, key) due now: this process has
// just finished the key's running message.
func (p *parkLot) poke(lane, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.lanes[lane] {
		if m.d.OrderingKey == key {
			m.next = time.Time{}
		}
	}
}

// unpark asks the sequencer about lane's due parked messages and returns
// those whose turn has come, ready for the caller (at most max). The
// others stay parked until their deadline, then go back to the broker.
func (b *Broker) unpark(ctx context.Context, lane string, max int) ([]*Delivery, error) {
	now := time.Now()
	ms := b.park.due(lane, now, max)
	if len(ms) == 0 {
		return nil, nil
	}
	sq := b.sequencer()
	var (
		out      []*Delivery
		firstErr error
	)
	for _, m := range ms {
		var (
			g     Grant
			ahead int64 = 1
			err   error
		)
		if sq == nil {
			err = b.noSequencer("receive", lane)
		} else {
			g, ahead, err = acquirePosition(ctx, sq, lane, m.d, m.seq)
		}
		if err == nil && g == GrantWait && ahead <= 1 && now.Before(m.deadline) {
			m.next = now.Add(parkPoll)
			b.park.putBack(m)
			continue
		}
		var keep bool
		if err != nil {
			keep, err = false, b.requeue(ctx, m.d, b.opts.OrderingRetry)
		} else {
			keep, err = b.admit(ctx, m.d, m.seq, g, ahead)
		}
		if keep && err == nil {
			keep, err = b.openLive(ctx, m.d)
		}
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if keep {
			out = append(out, m.d)
		}
	}
	if len(out) == 0 {
		return nil, firstErr
	}
	return out, nil
}
