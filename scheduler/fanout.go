package scheduler

import (
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Receive fan-out. A broker that caps one receive below what a lane's
// buffer holds (Capabilities.MaxBatch < Config.Prefetch: SQS's ten
// messages a ReceiveMessage) keeps a lane with one fetch loop to one
// batch per round trip, however large the backlog. While receives come
// back full with messages that waited (behind: the youngest of the batch
// was ready at least fanOutLag, and four of the receive's round trips,
// before it came), the lane's fetch loop starts more receivers, one per
// such receive of its own, up to fanOutFor's bound; each asks for one batch,
// and only when the buffer has room for it beside what the other
// receivers of the lane have asked for (fetchState.reserved), so nothing
// is received that the buffer cannot hold. A receiver stops as soon as a
// receive comes back short (or empty, or failed) or not behind, when the lane is
// paused or the buffer has no room for a batch: on an empty queue only
// the lane's own fetch loop polls, as before.
//
// Never on a broker that orders messages natively (Capabilities.Ordering:
// SQS FIFO queues): concurrent receives there would only take messages of
// a group that the driver must hold back behind the one in flight.
//
// Why "behind": a receive also comes back full when publishers keep pace
// with one receiver (a batch's worth arrives during each round trip), and
// more receives then only add requests ahead of the publishers' on the
// same broker (measured on the SQS emulator: the runtime with eight
// Client.Enqueue callers lost a quarter of its rate). A batch whose
// youngest message waited well beyond a round trip is a backlog.
const (
	maxReceivers = 4
	fanOutLag    = 25 * time.Millisecond
)

// behind reports whether ds, a receive that took rtt and returned at now,
// shows a backlog: even its youngest message was ready long before.
func behind(ds []*broker.Delivery, rtt time.Duration, now time.Time) bool {
	var youngest time.Time
	for _, d := range ds {
		ready := d.EnqueuedAt
		if d.RunAt.After(ready) {
			ready = d.RunAt
		}
		if ready.After(youngest) {
			youngest = ready
		}
	}
	return !youngest.IsZero() && now.Sub(youngest) >= max(fanOutLag, 4*rtt)
}

// fanOutFor is how many receives of one lane may be in flight at once.
func fanOutFor(prefetch int, caps broker.Capabilities) int {
	if caps.Ordering || caps.MaxBatch <= 0 || caps.MaxBatch >= prefetch {
		return 1
	}
	return min((prefetch+caps.MaxBatch-1)/caps.MaxBatch, maxReceivers)
}

// fetchState is one lane's receivers' shared account; its fields are
// guarded by Scheduler.mu.
type fetchState struct {
	batch    int // Capabilities.MaxBatch; 0: uncapped
	fan      int // fanOutFor
	reserved int // messages asked for by receives in flight
	extras   int // receivers running beside the fetch loop
}

// ask is how many messages to ask for with room free in the buffer.
func (f *fetchState) ask(room int) int {
	if f.batch > 0 && room > f.batch {
		return f.batch
	}
	return room
}

// spawn reports whether the fetch loop, whose receive of asked messages
// returned ds after rtt, starts one more receiver; callers hold s.mu.
func (s *Scheduler) spawn(l *laneState, f *fetchState, asked int, ds []*broker.Delivery, rtt time.Duration, now time.Time) bool {
	if f.extras+1 >= f.fan || asked < f.batch || len(ds) < asked || s.stopping || l.isPaused() || !behind(ds, rtt, now) {
		return false
	}
	if s.cfg.Prefetch-len(l.buf)-f.reserved < 2*f.batch {
		return false // room for the fetch loop's own next batch only
	}
	f.extras++
	return true
}

// receiveMore is one extra receiver of lane l (see the comment above).
func (s *Scheduler) receiveMore(l *laneState, f *fetchState) {
	defer s.fetchWG.Done()
	for {
		s.mu.Lock()
		if s.fetchCtx.Err() != nil || s.stopping || l.isPaused() || s.cfg.Prefetch-len(l.buf)-f.reserved < f.batch {
			f.extras--
			s.mu.Unlock()
			return
		}
		f.reserved += f.batch
		s.mu.Unlock()
		full := false
		_, ok := s.receive(l, f, f.batch, func(r receipt) {
			// Errors end this receiver: the fetch loop reports them and
			// backs off.
			full = r.err == nil && len(r.ds) >= f.batch && behind(r.ds, r.rtt, r.at)
			if !full {
				f.extras--
			}
		})
		if !ok {
			s.mu.Lock()
			f.extras--
			s.mu.Unlock()
			return
		}
		if !full {
			return
		}
	}
}
