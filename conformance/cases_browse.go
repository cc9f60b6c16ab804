package conformance

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// browseAll reads every page of a lane (its dead letters with dead), pages
// of at most page messages, and returns the IDs in order with the
// deliveries.
func browseAll(t testing.TB, b *broker.Broker, lane string, dead bool, page int) ([]string, []*broker.Delivery) {
	t.Helper()
	var ids []string
	var all []*broker.Delivery
	after := ""
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatalf("browse of %s did not end after 1000 pages", lane)
		}
		p, err := b.Browse(ctxFor(t, 10*time.Second), broker.BrowseRequest{Lane: lane, DeadLetters: dead, Max: page, After: after})
		if err != nil {
			t.Fatalf("browse %s (dead=%v): %v", lane, dead, err)
		}
		if len(p.Messages) > page {
			t.Fatalf("browse returned %d messages, asked for at most %d", len(p.Messages), page)
		}
		for _, d := range p.Messages {
			if d.Handle != nil {
				t.Errorf("browsed message %s carries a handle: browsing must not lease", d.ID)
			}
			ids = append(ids, d.ID)
			all = append(all, d)
		}
		if p.Next == "" {
			return ids, all
		}
		after = p.Next
	}
}

// TestBrowse: where the driver can read a queue without leasing it
// (broker.Browser), browsing ready messages and dead letters changes
// neither their order, their attempts nor their age, hides nothing from
// another reader, and pages through the whole queue. A driver that cannot
// browse says so with ErrUnsupported (operator tools then lease and give
// back, and say so).
func TestBrowse(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	if !b.CanBrowse() {
		_, err := b.Browse(ctxFor(t, 10*time.Second), broker.BrowseRequest{Lane: "interactive", Max: 1})
		if !errors.Is(err, broker.ErrUnsupported) {
			t.Fatalf("a driver without Browser: Browse = %v, want ErrUnsupported", err)
		}
		t.Log("declared: this driver cannot read a queue without leasing (no broker.Browser); operator tools lease and give back, and mark their output")
		return
	}
	const lane = "interactive"
	var want []string
	for _, body := range []string{"a", "b", "c", "d", "e"} {
		rs := publish(t, b, newMsg(lane, "browse.case", body))
		want = append(want, rs[0].ID)
	}
	eventually(t, 10*time.Second, func() string {
		if s := stats(t, b, lane); s.Ready != 5 {
			return "stats " + statsString(s) + ", want ready=5"
		}
		return ""
	})
	time.Sleep(1200 * time.Millisecond) // an age that a reset would visibly lose
	before := stats(t, b, lane)

	for round := 0; round < 3; round++ {
		got, ds := browseAll(t, b, lane, false, 2)
		if !slices.Equal(got, want) {
			t.Fatalf("browse round %d = %v, want the publish order %v", round, got, want)
		}
		for _, d := range ds {
			if d.Attempt != 0 {
				t.Errorf("browsed %s has attempt %d, want 0 (never delivered)", d.ID, d.Attempt)
			}
			if d.Kind != "browse.case" || len(d.Body) != 1 {
				t.Errorf("browsed %s = kind %q body %q", d.ID, d.Kind, d.Body)
			}
		}
	}
	after := stats(t, b, lane)
	if after.Ready != 5 || after.InFlight != 0 {
		t.Fatalf("after browsing, stats %s, want ready=5 in_flight=0", statsString(after))
	}
	if b.Capabilities().OldestReadyAge && after.OldestReady < before.OldestReady {
		t.Fatalf("browsing reset the oldest ready age: %s before, %s after", before.OldestReady, after.OldestReady)
	}

	// The consumer gets them in the browsed order, each on its first attempt.
	got := receiveN(t, b, lane, 5, 30*time.Second, 15*time.Second)
	var ids []string
	for _, d := range got {
		ids = append(ids, d.ID)
		if d.Attempt != 1 {
			t.Errorf("%s delivered with attempt %d after browsing, want 1", d.ID, d.Attempt)
		}
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("received %v after browsing, want %v", ids, want)
	}

	// Dead letters: listed by two readers at once, neither hides them.
	for _, d := range got[:3] {
		if err := b.DeadLetter(ctxFor(t, 10*time.Second), d, &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "browse case: " + string(d.Body)}); err != nil {
			t.Fatalf("dead-letter: %v", err)
		}
	}
	ack(t, b, got[3:]...)
	eventually(t, 10*time.Second, func() string {
		if s := stats(t, b, lane); s.DeadLettered != 3 {
			return "stats " + statsString(s) + ", want dead=3"
		}
		return ""
	})
	first, dls := browseAll(t, b, lane, true, 2)
	second, _ := browseAll(t, b, lane, true, 100)
	first, second = sorted(first), sorted(second)
	if !slices.Equal(first, second) {
		t.Fatalf("two listings of the dead letters differ: %v and %v", first, second)
	}
	if !slices.Equal(first, sorted(want[:3])) {
		t.Fatalf("dead letters listed = %v, want %v", first, sorted(want[:3]))
	}
	for _, d := range dls {
		if d.DeadLetter == nil || d.DeadLetter.Reason != broker.ReasonPermanent || d.DeadLetter.Error != "browse case: "+string(d.Body) {
			t.Errorf("browsed dead letter %s has record %+v", d.ID, d.DeadLetter)
		}
	}
	// Still there for a consumer of the dead-letter queue.
	dead := receiveDead(t, b, lane, 3, 10*time.Second)
	if len(dead) != 3 {
		t.Fatalf("after browsing, %d of 3 dead letters could be received", len(dead))
	}
	ack(t, b, dead...)
}

func sorted(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
