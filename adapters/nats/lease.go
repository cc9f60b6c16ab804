package nats

import (
	"context"
	"time"
)

// Leases. The server's lease is the consumer's AckWait (the ack_wait URL
// parameter), fixed per consumer. A delivery asked for with a longer lease
// (ReceiveRequest.Lease or Extend) is kept alive by the driver: a keeper
// sends InProgress, which restarts the AckWait, every half AckWait until
// the requested lease is covered. The lease then ends between the
// requested deadline and half an AckWait after it; if this process dies,
// the message is redelivered at most one AckWait after the last
// InProgress. A lease shorter than AckWait lasts AckWait, and the delivery
// reports that real deadline.

// setLease records that the server's AckWait timer (re)started no earlier
// than sent and that the caller wants the lease to last until target. It
// returns the deadline to report. h.mu must be held.
func (h *handle) setLease(sent, target time.Time) time.Time {
	h.sent = sent
	h.target = target
	h.deadline = sent.Add(h.lc.wait)
	if target.After(h.deadline) {
		h.deadline = target
		h.d.keep(h)
	}
	return h.deadline
}

// keep registers h with the keeper.
func (d *Driver) keep(h *handle) {
	d.keepMu.Lock()
	d.kept[h] = struct{}{}
	d.keepMu.Unlock()
}

// keeper sends InProgress for kept deliveries until their requested leases
// are covered, they are settled, or ctx ends.
func (d *Driver) keeper(ctx context.Context) {
	defer d.bg.Done()
	tick := max(d.cfg.ackWait/4, 10*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.keepMu.Lock()
		hs := make([]*handle, 0, len(d.kept))
		for h := range d.kept {
			hs = append(hs, h)
		}
		d.keepMu.Unlock()
		for _, h := range hs {
			if h.keepAlive() {
				continue
			}
			d.keepMu.Lock()
			delete(d.kept, h)
			d.keepMu.Unlock()
		}
	}
}

// keepAlive sends InProgress when half the AckWait has passed since the
// timer last started. It returns false when h needs no more keeping.
func (h *handle) keepAlive() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	wait := h.lc.wait
	serverEnd := h.sent.Add(wait)
	now := time.Now()
	switch {
	case h.settled || h.lost:
		return false
	case !serverEnd.Before(h.target):
		return false // the server's own timer covers the rest
	case !now.Before(serverEnd):
		// Missed the server's deadline (a stall or an outage): another
		// consumer may hold the message now.
		h.lost = true
		return false
	case now.Sub(h.sent) < wait/2:
		return true
	}
	if err := h.msg.InProgress(); err != nil {
		return true // disconnected: try again on the next tick
	}
	h.sent = now
	return true
}
