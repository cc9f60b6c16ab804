package scheduler

import (
	"context"
	"sync"

	"github.com/switchyard-dev/switchyard/broker"
)

// Receive fan-out. A broker whose receives return at most a few messages
// (Capabilities.MaxBatch: SQS returns ten per ReceiveMessage) caps a lane's
// fetch loop at one small batch per round trip, however large the backlog
// and the room in the buffer: the handlers then wait on the receives
// (Slots 64 on SQS drained at about half the rate of eight consumers). When
// a receive comes back full and the buffer has room for more than one such
// batch, the fetch loop runs up to maxFanOut receives at once, each for
// one batch and without waiting (the backlog is there); it keeps doing so
// while every one of them comes back full, and goes back to one waiting
// receive as soon as one does not. An idle or slow lane therefore costs
// what it did (one receive at a time), and the number of receives per
// message stays the same: only their round trips overlap.
const maxFanOut = 4

// fanOut is how many receives to run at once for room messages when a
// receive returns at most capped (0: no cap) and wide says the last ones
// all came back full.
func fanOut(room, capped int, wide bool) int {
	if !wide || capped <= 0 || room <= capped {
		return 1
	}
	return min((room+capped-1)/capped, maxFanOut)
}

// receiveWide runs n receives of up to capped messages each (together at
// most room) at once and returns their deliveries in receive order; full
// reports that every receive came back full. An error is returned only
// when every receive failed: the others' deliveries are leased to this
// process and must not be dropped.
func (s *Scheduler) receiveWide(ctx context.Context, l *laneState, room, capped, n int) (ds []*broker.Delivery, full bool, err error) {
	got := make([][]*broker.Delivery, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		max := min(capped, room-i*capped)
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.b.Receive(ctx, broker.ReceiveRequest{Lane: l.def.Name, Max: max, Lease: s.cfg.Lease})
		}()
	}
	wg.Wait()
	full = true
	failed := 0
	for i := range n {
		if errs[i] != nil {
			failed++
			if err == nil {
				err = errs[i]
			}
			full = false
			continue
		}
		if len(got[i]) < min(capped, room-i*capped) {
			full = false
		}
		ds = append(ds, got[i]...)
	}
	if failed < n {
		err = nil
	}
	return ds, full, err
}
