package store

import (
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

func noneDone(int64) (bool, error) { return false, nil }

// A number assigned but never offered holds its key for the asker's lease
// and the stall window, then later numbers go ahead; a number that started
// once is never skipped.
func TestSeqAcquireStall(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const lease = 30 * time.Second
	k := SeqKey{Assigned: 12, NextStart: 10, Progress: t0}

	at := func(d time.Duration) (time.Time, time.Time) { return t0.Add(d).Add(lease), t0.Add(d) }
	until, now := at(SeqStall)
	if g, _, _ := SeqAcquire(&k, 11, until, now, SeqStall, noneDone, noneDone); g != broker.GrantWait {
		t.Fatalf("inside the stall window: %v, want wait", g)
	}
	// A consumer that received 10 and died holds it for its lease: the
	// window is counted beyond the lease.
	until, now = at(SeqStall + lease)
	if g, _, _ := SeqAcquire(&k, 11, until, now, SeqStall, noneDone, noneDone); g != broker.GrantWait {
		t.Fatalf("inside the lease and stall window: %v, want wait", g)
	}
	until, now = at(SeqStall + lease + time.Millisecond)
	g, write, _ := SeqAcquire(&k, 11, until, now, SeqStall, noneDone, noneDone)
	if g != broker.GrantRun || !write || k.NextStart != 11 || k.Running != 11 || !k.Started {
		t.Fatalf("after the stall window: %v write=%v %+v, want run of 11", g, write, k)
	}
	until = t0.Add(time.Hour)
	if g, _, _ := SeqAcquire(&k, 10, until, t0.Add(time.Minute), SeqStall, noneDone, noneDone); g != broker.GrantLate {
		t.Fatalf("the skipped number: %v, want late", g)
	}

	// 11 started and its holder vanished (lease over): 12 waits for 11's
	// redelivery for a stall window after the lease.
	k.Until = t0.Add(time.Minute)
	if g, _, _ := SeqAcquire(&k, 12, until, t0.Add(time.Minute+SeqStall), SeqStall, noneDone, noneDone); g != broker.GrantWait {
		t.Fatalf("a started number was skipped within the stall window after its lease: %v", g)
	}
	if g, _, _ := SeqAcquire(&k, 11, until, t0.Add(time.Hour), SeqStall, noneDone, noneDone); g != broker.GrantRun {
		t.Fatalf("the redelivery of the holder's number: %v, want run", g)
	}
	// Given back for a retry (not done): never skipped, however long.
	SeqRelease(&k, 11, false, t0.Add(time.Hour))
	if g, _, _ := SeqAcquire(&k, 12, until, t0.Add(48*time.Hour), SeqStall, noneDone, noneDone); g != broker.GrantWait {
		t.Fatalf("a number waiting for its retry was skipped: %v", g)
	}
	if g, _, _ := SeqAcquire(&k, 11, until, t0.Add(48*time.Hour), SeqStall, noneDone, noneDone); g != broker.GrantRun {
		t.Fatalf("the retry: %v, want run", g)
	}
	if mark, adv := SeqRelease(&k, 11, true, t0.Add(time.Hour)); mark || !adv || k.NextStart != 12 || k.Started || k.Running != 0 {
		t.Fatalf("release: mark=%v adv=%v %+v", mark, adv, k)
	}
	if mark, adv := SeqRelease(&k, 99, true, t0.Add(time.Hour)); mark || adv {
		t.Fatalf("a number never assigned must change nothing: mark=%v adv=%v", mark, adv)
	}
}

// Another number's live lease blocks the turn's number (a skip left the
// old holder running); an ended one does not.
func TestSeqAcquireOtherHolder(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	k := SeqKey{Assigned: 5, NextStart: 3, Running: 2, Until: t0.Add(time.Second), Started: true, Progress: t0}
	if g, _, _ := SeqAcquire(&k, 3, t0.Add(time.Hour), t0, SeqStall, noneDone, noneDone); g != broker.GrantWait {
		t.Fatalf("live holder: %v, want wait", g)
	}
	if g, _, _ := SeqAcquire(&k, 3, t0.Add(time.Hour), t0.Add(2*time.Second), SeqStall, noneDone, noneDone); g != broker.GrantRun {
		t.Fatalf("ended holder: %v, want run", g)
	}
}

func TestSeqBase(t *testing.T) {
	if SeqBase(time.Unix(0, 0)) != 1 || SeqBase(time.Unix(-5, 0)) != 1 {
		t.Fatal("a clock at or before 1970 must still number from 1")
	}
	if a, b := SeqBase(time.Unix(100, 0)), SeqBase(time.Unix(101, 0)); b <= a {
		t.Fatal("bases must grow with the clock")
	}
}

// A holder whose lease ended and whose message never came back (moved by a
// broker's own delivery limit, purged) holds the key one stall window
// after its lease, no longer.
func TestSeqAcquireHolderNeverBack(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	k := SeqKey{Assigned: 3, NextStart: 1, Running: 1, Until: t0, Started: true, Progress: t0.Add(-time.Minute)}
	if g, _, _ := SeqAcquire(&k, 2, t0.Add(time.Hour), t0.Add(SeqStall), SeqStall, noneDone, noneDone); g != broker.GrantWait {
		t.Fatalf("inside the window: %v, want wait", g)
	}
	if g, _, _ := SeqAcquire(&k, 2, t0.Add(time.Hour), t0.Add(SeqStall+time.Second), SeqStall, noneDone, noneDone); g != broker.GrantRun || k.NextStart != 2 {
		t.Fatalf("after the window: %v next=%d, want run of 2", g, k.NextStart)
	}
}

// A skip passes over the lost number alone: numbers between it and the
// asker keep their order, each with a grace to show up before it is
// skipped in turn; numbers finished out of turn are passed over with it.
func TestSeqAcquireSkipsOne(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const lease = 10 * time.Second
	k := SeqKey{Assigned: 20, NextStart: 10, Progress: t0}
	finished := map[int64]bool{11: true}
	take := func(n int64) (bool, error) {
		ok := finished[n]
		delete(finished, n)
		return ok, nil
	}
	isDone := func(n int64) (bool, error) { return finished[n], nil }

	now := t0.Add(SeqStall + lease + time.Second)
	g, write, err := SeqAcquire(&k, 15, now.Add(lease), now, SeqStall, isDone, take)
	if err != nil || g != broker.GrantWait || !write {
		t.Fatalf("asker 15 after 10 stalled: %v write=%v err=%v, want wait (stored)", g, write, err)
	}
	if k.NextStart != 12 || len(finished) != 0 {
		t.Fatalf("skip: next=%d finished=%v, want 12 (10 skipped, 11 done) and nothing remembered", k.NextStart, finished)
	}
	// 12 is offered within the grace: it runs, in order.
	now = now.Add(seqGrace(SeqStall) / 2)
	if g, _, _ := SeqAcquire(&k, 15, now.Add(lease), now, SeqStall, isDone, take); g != broker.GrantWait {
		t.Fatalf("asker 15 inside the grace: %v, want wait", g)
	}
	if g, _, _ := SeqAcquire(&k, 12, now.Add(lease), now, SeqStall, isDone, take); g != broker.GrantRun {
		t.Fatalf("12 after the skip: %v, want run", g)
	}
	SeqRelease(&k, 12, true, now)
	// 13 never shows up: skipped after the grace, not a full window.
	now = now.Add(seqGrace(SeqStall) + time.Second)
	if g, _, _ := SeqAcquire(&k, 15, now.Add(lease), now, SeqStall, isDone, take); g != broker.GrantWait || k.NextStart != 13 {
		t.Fatalf("13 within the full window: %v next=%d, want wait at 13", g, k.NextStart)
	}
	now = now.Add(SeqStall)
	if g, _, _ := SeqAcquire(&k, 15, now.Add(lease), now, SeqStall, isDone, take); g != broker.GrantWait || k.NextStart != 14 {
		t.Fatalf("13 lost: %v next=%d, want wait at 14", g, k.NextStart)
	}
	now = now.Add(seqGrace(SeqStall) + time.Second)
	if g, _, _ := SeqAcquire(&k, 15, now.Add(lease), now, SeqStall, isDone, take); g != broker.GrantRun || k.NextStart != 15 {
		t.Fatalf("14 lost too: %v next=%d, want 15 to run", g, k.NextStart)
	}
}
