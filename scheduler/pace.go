package scheduler

import "time"

// Receive pacing. A lane's fetch loop receives again as soon as its buffer
// has room, and with handlers that keep up the buffer always has room: at a
// high arrival rate every receive then finds only the few messages that
// came in during the previous one (2–8 measured on the embedded broker and
// NATS), and each costs a broker round trip or a database transaction. The
// pacer measures the lane's arrival rate from the receives themselves and,
// while it is high, waits briefly before the next receive so that it takes
// a bigger batch: at most maxPace, and only as long as a batch of
// paceTarget messages takes to arrive at that rate.
//
// Below paceRate messages per second it never waits, so the latency at
// ordinary rates (200 and 1,000 tasks/s in the benchmarks) is unchanged; an
// empty receive, an error or a batch that fills the room ends pacing until
// the rate is measured high again. At a high rate a task waits at most
// maxPace more before it is received, against the milliseconds it already
// queues behind the others at that rate.
const (
	paceRate   = 5000                   // messages per second
	paceTarget = 32                     // messages a paced receive aims for
	maxPace    = 1 * time.Millisecond   // the longest wait before a receive
	paceReset  = 100 * time.Millisecond // a gap this long between receives is no rate
)

// receivePacer is one fetch loop's arrival-rate estimate; not safe for
// concurrent use (each loop has its own).
type receivePacer struct {
	last time.Time // when the previous non-empty receive returned
	rate float64   // messages per second, smoothed; 0: unknown or low
	full bool      // the previous receive filled the room asked for
}

// received records a receive that returned n messages at now, having
// asked for up to room.
func (p *receivePacer) received(now time.Time, n, room int, err error) {
	if err != nil || n == 0 {
		*p = receivePacer{}
		return
	}
	p.full = n >= room
	if !p.last.IsZero() {
		if gap := now.Sub(p.last); gap > 0 && gap < paceReset {
			r := float64(n) / gap.Seconds()
			if p.rate == 0 {
				p.rate = r
			} else {
				p.rate = (p.rate + r) / 2
			}
		} else {
			p.rate = 0
		}
	}
	p.last = now
}

// pause is how long to wait before receiving up to room messages.
func (p *receivePacer) pause(room int) time.Duration {
	if p.full || p.rate < paceRate || room <= 1 {
		return 0
	}
	d := time.Duration(float64(min(room, paceTarget)) / p.rate * float64(time.Second))
	return min(d, maxPace)
}
