package scheduler

import (
	"errors"
	"testing"
	"time"
)

func TestReceivePacer_Pause(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	type recv struct {
		us, n, room int
		err         error
	}
	for _, c := range []struct {
		name  string
		recvs []recv
		room  int
		want  time.Duration
	}{
		{"first receive", nil, 128, 0},
		{"one receive: no rate yet", []recv{{0, 5, 128, nil}}, 128, 0},
		// 1,000 messages/s: one every millisecond.
		{"ordinary rate", []recv{{0, 1, 128, nil}, {1000, 1, 128, nil}, {2000, 1, 128, nil}}, 128, 0},
		// 5 messages every 200 µs: 25,000/s; 32 of them take 1.28 ms, capped.
		{"high rate, capped", []recv{{0, 5, 128, nil}, {200, 5, 128, nil}, {400, 5, 128, nil}}, 128, maxPace},
		// 100,000/s: 32 messages take 320 µs.
		{"very high rate", []recv{{0, 10, 128, nil}, {100, 10, 128, nil}, {200, 10, 128, nil}}, 128, 320 * time.Microsecond},
		// 100,000/s with room for 8: 80 µs.
		{"little room", []recv{{0, 10, 128, nil}, {100, 10, 128, nil}}, 8, 80 * time.Microsecond},
		{"room for one", []recv{{0, 10, 128, nil}, {100, 10, 128, nil}}, 1, 0},
		{"the last receive filled its room", []recv{{0, 10, 128, nil}, {100, 10, 10, nil}}, 128, 0},
		{"an empty receive resets", []recv{{0, 10, 128, nil}, {100, 10, 128, nil}, {200, 0, 128, nil}}, 128, 0},
		{"an error resets", []recv{{0, 10, 128, nil}, {100, 10, 128, nil}, {200, 0, 128, errors.New("down")}}, 128, 0},
		{"a long gap is no rate", []recv{{0, 10, 128, nil}, {100, 10, 128, nil}, {200_000, 10, 128, nil}}, 128, 0},
		// The estimate is smoothed: 100,000/s then 60,000/s average to
		// 80,000/s, at which 32 messages take 400 µs.
		{"smoothed", []recv{{0, 10, 128, nil}, {100, 10, 128, nil}, {200, 6, 128, nil}}, 128, 400 * time.Microsecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var p receivePacer
			for _, r := range c.recvs {
				p.received(at(r.us), r.n, r.room, r.err)
			}
			if got := p.pause(c.room); (got - c.want).Abs() > time.Microsecond {
				t.Errorf("pause(%d) = %v, want %v (rate %.0f/s)", c.room, got, c.want, p.rate)
			}
		})
	}
}
