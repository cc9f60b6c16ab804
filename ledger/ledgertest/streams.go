package ledgertest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// Streams: progress and chunk entries share the task's sequence with its
// events; ReadStream merges them in write order, resumes from any offset
// without losing or repeating an entry, and refuses entries above the
// limits with the limit named.
func Streams(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	mustTransition(t, l, task.ID, ledger.Running, "start")
	last, err := l.AppendStream(ctx(t), task.ID, 1, []ledger.StreamEntry{
		{Kind: ledger.StreamProgress, Fraction: 0.25, Message: "a quarter"},
		{Kind: ledger.StreamChunk, Data: []byte("hello ")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendStream(ctx(t), task.ID, 1, []ledger.StreamEntry{{Kind: ledger.StreamChunk, Data: []byte("world")}}); err != nil {
		t.Fatal(err)
	}
	// A note (no state change) takes a number but is not in the stream.
	if err := l.AppendEvent(ctx(t), ledger.Event{TaskID: task.ID, Reason: "note"}); err != nil {
		t.Fatal(err)
	}
	mustTransition(t, l, task.ID, ledger.Completed, "done")

	all, err := l.ReadStream(ctx(t), task.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, e := range all {
		if i > 0 && e.Offset <= all[i-1].Offset {
			t.Fatalf("offsets not increasing: %+v", all)
		}
		switch e.Kind {
		case ledger.StreamState:
			got = append(got, "state:"+string(e.State))
		case ledger.StreamProgress:
			got = append(got, fmt.Sprintf("progress:%.2f:%s", e.Fraction, e.Message))
		case ledger.StreamChunk:
			got = append(got, "chunk:"+string(e.Data))
			if e.Attempt != 1 {
				t.Errorf("chunk attempt %d, want 1", e.Attempt)
			}
		}
	}
	want := []string{"state:queued", "state:running", "progress:0.25:a quarter", "chunk:hello ", "chunk:world", "state:completed"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stream %v, want %v", got, want)
	}
	if all[3].Offset != last {
		t.Errorf("AppendStream returned %d, the chunk has offset %d", last, all[3].Offset)
	}
	// Resume from every offset, in pages of one: the same entries, each once.
	var resumed []int64
	for off := int64(0); ; {
		page, err := l.ReadStream(ctx(t), task.ID, off, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		resumed = append(resumed, page[0].Offset)
		off = page[0].Offset
	}
	if len(resumed) != len(all) {
		t.Fatalf("paged read saw %v, want the %d offsets of %+v", resumed, len(all), all)
	}
	for i := range resumed {
		if resumed[i] != all[i].Offset {
			t.Fatalf("paged read saw %v", resumed)
		}
	}
	// Limits: named in the error; nothing is written.
	_, err = l.AppendStream(ctx(t), task.ID, 1, []ledger.StreamEntry{{Kind: ledger.StreamChunk, Data: make([]byte, ledger.MaxChunkBytes+ledger.SealOverhead+1)}})
	wantInvalid(t, "oversized chunk", err)
	if !bytes.Contains([]byte(err.Error()), []byte("MaxChunkBytes")) {
		t.Errorf("oversized chunk error %q does not name the limit", err)
	}
	for _, bad := range []ledger.StreamEntry{
		{Kind: ledger.StreamProgress, Fraction: 1.5},
		{Kind: ledger.StreamProgress, Fraction: -0.1},
		{Kind: ledger.StreamProgress, Message: string(make([]byte, ledger.MaxProgressMessage+1))},
		{Kind: ledger.StreamState},
		{Kind: "other"},
	} {
		_, err := l.AppendStream(ctx(t), task.ID, 1, []ledger.StreamEntry{bad})
		wantInvalid(t, fmt.Sprintf("entry %+v", bad.Kind), err)
	}
	_, err = l.AppendStream(ctx(t), task.ID, 1, nil)
	wantInvalid(t, "no entries", err)
	_, err = l.AppendStream(ctx(t), task.ID, 1, make([]ledger.StreamEntry, ledger.MaxStreamBatch+1))
	wantInvalid(t, "too many entries", err)
	_, err = l.AppendStream(ctx(t), "no-such-task", 1, []ledger.StreamEntry{{Kind: ledger.StreamChunk}})
	wantNotFound(t, "append to unknown task", err)
	_, err = l.ReadStream(ctx(t), task.ID, -1, 0)
	wantInvalid(t, "negative offset", err)
	again, err := l.ReadStream(ctx(t), task.ID, 0, 0)
	if err != nil || len(again) != len(all) {
		t.Fatalf("after refused appends: %d entries (%v), want %d", len(again), err, len(all))
	}

	// LatestProgress: the newest progress entry of each task.
	other := mustCreate(t, l, newTask(t))
	for _, f := range []float64{0.1, 0.6} {
		if _, err := l.AppendStream(ctx(t), other.ID, 2, []ledger.StreamEntry{{Kind: ledger.StreamProgress, Fraction: f, Message: fmt.Sprint(f)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.AppendStream(ctx(t), other.ID, 2, []ledger.StreamEntry{{Kind: ledger.StreamChunk, Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	lp, err := l.LatestProgress(ctx(t), []string{task.ID, other.ID, "none"})
	if err != nil {
		t.Fatal(err)
	}
	if len(lp) != 2 || lp[task.ID].Fraction != 0.25 || lp[other.ID].Fraction != 0.6 || lp[other.ID].Message != "0.6" || lp[other.ID].Attempt != 2 {
		t.Fatalf("LatestProgress: %+v", lp)
	}

	// PruneStreams keeps running tasks' entries and their events.
	n, err := l.PruneStreams(ctx(t), time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("PruneStreams deleted %d, want the completed task's 3 entries", n)
	}
	left, err := l.ReadStream(ctx(t), task.ID, 0, 0)
	if err != nil || len(left) != 3 {
		t.Fatalf("after PruneStreams the completed task has %d entries (%v), want its 3 state changes", len(left), err)
	}
	kept, err := l.ReadStream(ctx(t), other.ID, 0, 0)
	if err != nil || len(kept) != 4 {
		t.Fatalf("the queued task has %d entries after PruneStreams (%v), want 4", len(kept), err)
	}
}

// RaceAppendStream: appends of one task from many goroutines, interleaved
// with transitions, each get their own offsets; a reader that follows the
// stream meanwhile sees every entry exactly once, in offset order.
func RaceAppendStream(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	const writers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := l.AppendStream(ctx(t), task.ID, 1, []ledger.StreamEntry{{Kind: ledger.StreamChunk, Data: []byte(fmt.Sprintf("%d-%d", w, i))}}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	seen := map[string]int{}
	var off int64
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx(t).Done():
				return
			default:
			}
			page, err := l.ReadStream(ctx(t), task.ID, off, 7)
			if err != nil {
				errs <- err
				return
			}
			for _, e := range page {
				if e.Offset <= off {
					errs <- fmt.Errorf("offset %d after %d", e.Offset, off)
					return
				}
				off = e.Offset
				if e.Kind == ledger.StreamChunk {
					seen[string(e.Data)]++
				}
			}
			if len(seen) == writers*each && len(page) == 0 {
				return
			}
		}
	}()
	wg.Wait()
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("chunk %s seen %d times", k, n)
		}
	}
	if len(seen) != writers*each {
		t.Fatalf("the reader saw %d chunks, want %d", len(seen), writers*each)
	}
}

func tokenHash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// Waits: a wait is recorded once per task and name; a signal by task, by
// correlation key or by token moves it once; a second signal, a wrong
// token or an expired wait changes nothing.
func Waits(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	key := fmt.Sprintf("order-%d", time.Now().UnixNano())
	w, created, err := l.PutWait(ctx(t), ledger.Wait{TaskID: task.ID, Name: "paid", Tenant: "acme", CorrelationKey: key,
		TokenHash: tokenHash("secret"), Timeout: time.Hour})
	if err != nil || !created {
		t.Fatalf("PutWait: %v created=%v", err, created)
	}
	if w.State != ledger.WaitPending || w.Timeout != time.Hour || w.CorrelationKey != key {
		t.Fatalf("PutWait stored %+v", w)
	}
	again, created, err := l.PutWait(ctx(t), ledger.Wait{TaskID: task.ID, Name: "paid", TokenHash: tokenHash("other")})
	if err != nil || created || !bytes.Equal(again.TokenHash, tokenHash("secret")) {
		t.Fatalf("second PutWait: %+v created=%v %v, want the first", again, created, err)
	}
	// Another task cannot take an open wait's correlation key.
	task2 := mustCreate(t, l, newTask(t))
	_, _, err = l.PutWait(ctx(t), ledger.Wait{TaskID: task2.ID, Name: "paid", Tenant: "acme", CorrelationKey: key})
	wantIs(t, "PutWait with a held correlation key", err, ledger.ErrConflict)
	// Another tenant can.
	if _, _, err := l.PutWait(ctx(t), ledger.Wait{TaskID: task2.ID, Name: "paid", Tenant: "other", CorrelationKey: key}); err != nil {
		t.Fatal(err)
	}

	_, err = l.SignalWait(ctx(t), ledger.WaitTarget{TokenHash: tokenHash("wrong")}, []byte("x"))
	wantNotFound(t, "signal with a wrong token", err)
	_, err = l.SignalWait(ctx(t), ledger.WaitTarget{Tenant: "nobody", CorrelationKey: key}, []byte("x"))
	wantNotFound(t, "signal with another tenant's key", err)
	if got, _ := l.GetWait(ctx(t), task.ID, "paid"); got.State != ledger.WaitPending {
		t.Fatalf("a refused signal changed the wait: %+v", got)
	}
	found, err := l.FindWait(ctx(t), ledger.WaitTarget{TokenHash: tokenHash("secret")})
	if err != nil || found.TaskID != task.ID {
		t.Fatalf("FindWait by token: %+v %v", found, err)
	}
	sig, err := l.SignalWait(ctx(t), ledger.WaitTarget{TokenHash: tokenHash("secret")}, []byte(`{"amount":3}`))
	if err != nil || sig.State != ledger.WaitSignalled || string(sig.Payload) != `{"amount":3}` || sig.TaskID != task.ID {
		t.Fatalf("SignalWait: %+v %v", sig, err)
	}
	_, err = l.SignalWait(ctx(t), ledger.WaitTarget{TokenHash: tokenHash("secret")}, []byte("again"))
	wantIs(t, "reused token", err, ledger.ErrConflict)
	_, err = l.SignalWait(ctx(t), ledger.WaitTarget{Tenant: "acme", CorrelationKey: key}, []byte("again"))
	wantIs(t, "signal by key of a closed wait", err, ledger.ErrConflict)
	_, err = l.ExpireWait(ctx(t), task.ID, "paid")
	wantIs(t, "expire a signalled wait", err, ledger.ErrConflict)
	got, err := l.GetWait(ctx(t), task.ID, "paid")
	if err != nil || got.State != ledger.WaitSignalled || string(got.Payload) != `{"amount":3}` {
		t.Fatalf("after refused signals: %+v %v", got, err)
	}
	// The key is free again once its wait closed.
	if _, _, err := l.PutWait(ctx(t), ledger.Wait{TaskID: task2.ID, Name: "paid2", Tenant: "acme", CorrelationKey: key}); err != nil {
		t.Fatalf("PutWait with a released key: %v", err)
	}
	// By task and name; expiry.
	exp, err := l.ExpireWait(ctx(t), task2.ID, "paid")
	if err != nil || exp.State != ledger.WaitTimedOut {
		t.Fatalf("ExpireWait: %+v %v", exp, err)
	}
	_, err = l.SignalWait(ctx(t), ledger.WaitTarget{TaskID: task2.ID, Name: "paid"}, nil)
	wantIs(t, "signal of an expired wait", err, ledger.ErrConflict)
	if s, err := l.SignalWait(ctx(t), ledger.WaitTarget{Tenant: "acme", CorrelationKey: key}, nil); err != nil || s.Name != "paid2" {
		t.Fatalf("signal by key: %+v %v", s, err)
	}

	_, err = l.GetWait(ctx(t), task.ID, "none")
	wantNotFound(t, "GetWait unknown", err)
	_, _, err = l.PutWait(ctx(t), ledger.Wait{TaskID: "no-such-task", Name: "x"})
	wantNotFound(t, "PutWait of an unknown task", err)
	for _, bad := range []ledger.Wait{{TaskID: task.ID}, {TaskID: task.ID, Name: "x", TokenHash: []byte("short")}, {TaskID: task.ID, Name: "x", Timeout: -1}} {
		_, _, err := l.PutWait(ctx(t), bad)
		wantInvalid(t, "bad wait", err)
	}
	for _, bad := range []ledger.WaitTarget{{}, {TaskID: task.ID}, {TaskID: task.ID, Name: "paid", CorrelationKey: key}} {
		_, err := l.SignalWait(ctx(t), bad, nil)
		wantInvalid(t, "bad target", err)
	}
	// A race of signals: exactly one wins.
	task3 := mustCreate(t, l, newTask(t))
	if _, _, err := l.PutWait(ctx(t), ledger.Wait{TaskID: task3.ID, Name: "go"}); err != nil {
		t.Fatal(err)
	}
	var wins sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := 0; i < 8; i++ {
		wins.Add(1)
		go func() {
			defer wins.Done()
			_, err := l.SignalWait(ctx(t), ledger.WaitTarget{TaskID: task3.ID, Name: "go"}, []byte{byte(i)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, ledger.ErrConflict):
			default:
				t.Errorf("racing signal: %v", err)
			}
		}()
	}
	wins.Wait()
	if won != 1 {
		t.Fatalf("%d racing signals won, want 1", won)
	}
}
