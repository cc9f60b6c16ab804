package store

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// TestHub_Overflow: a listener that falls more than NoteBuffer behind has
// what it missed replaced by one gap, which it gets even though no note
// follows; a source that fails is restarted.
func TestHub_Overflow(t *testing.T) {
	t.Parallel()
	emitted := make(chan struct{})
	runs := 0
	h := &Hub{Run: func(ctx context.Context, ready func(), emit func(ledger.Note)) {
		runs++
		ready()
		if runs == 1 {
			for i := 0; i < NoteBuffer+10; i++ {
				emit(ledger.Note{Topic: "t", TaskID: "a"})
			}
			emit(ledger.Note{Topic: "t", TaskID: "after"}) // dropped too: the buffer is full
			close(emitted)
			return // a failure: the hub restarts it, with a gap
		}
		<-ctx.Done()
	}}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := h.Listen(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	<-emitted
	n, gap := 0, false
	for !gap {
		select {
		case note := <-ch:
			if note.Topic == ledger.TopicGap {
				gap = true
				break
			}
			n++
		case <-ctx.Done():
			t.Fatalf("no gap note after %d notes", n)
		}
	}
	if n > 1 {
		t.Fatalf("%d notes before the gap, want at most the one in hand when the queue overflowed", n)
	}
	cancel()
	for range ch { // closed when the listener's context ends
	}
	if _, err := (&Hub{Run: h.Run}).Listen(ctx, "test"); err == nil {
		t.Fatal("Listen with an ended context succeeded")
	}
	h.Close()
	if _, err := h.Listen(context.Background(), "test"); err == nil {
		t.Fatal("Listen after Close succeeded")
	}
}
