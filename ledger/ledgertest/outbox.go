package ledgertest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// The outbox cases (ledger.Outbox, an optional interface) join Cases from
// here.
func init() {
	Cases = append(Cases,
		Case{"OutboxLifecycle", OutboxLifecycle},
		Case{"OutboxLease", OutboxLease},
		Case{"OutboxRaceClaim", OutboxRaceClaim},
		Case{"OutboxTxType", OutboxTxType},
		Case{"OutboxOrdering", OutboxOrdering},
	)
}

func outboxOf(t *testing.T, l ledger.Ledger) ledger.Outbox {
	t.Helper()
	o := ledger.OutboxOf(l)
	if o == nil {
		t.Skip("this store has no outbox (ledger.Outbox is optional)")
	}
	return o
}

// OutboxLifecycle: CreateOutbox records tasks with rows (an invalid task
// fails alone, a taken key gets its task and no row); a claim returns the
// rows oldest first with their tasks and headers, and another owner gets
// none of them; a released row is claimed again with its try counted; a
// row is deleted only by its owner; OutboxStats counts the rows.
func OutboxLifecycle(t *testing.T, mk Maker) {
	l := mk(t)
	o := outboxOf(t, l)
	c := ctx(t)
	old, _, err := l.Create(c, &ledger.Task{Kind: "k", Lane: "batch", IdempotencyKey: "taken"})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := o.CreateOutbox(c, []ledger.OutboxTask{
		{Task: &ledger.Task{Kind: "k", Lane: "batch", Args: []byte(`{"n":1}`)}, Headers: map[string]string{"traceparent": "00-1"}},
		{Task: &ledger.Task{Kind: "k", Lane: "bad lane!"}},
		{Task: &ledger.Task{Kind: "k", Lane: "interactive", IdempotencyKey: "taken"}},
		{Task: &ledger.Task{Kind: "k2", Lane: "interactive", OrderingKey: "o"}},
	}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Err != nil || !rs[0].Created || rs[3].Err != nil || !rs[3].Created {
		t.Fatalf("new tasks: %+v %+v", rs[0], rs[3])
	}
	if !errors.Is(rs[1].Err, broker.ErrInvalid) {
		t.Errorf("invalid task: %+v", rs[1])
	}
	if rs[2].Err != nil || rs[2].Created || rs[2].Task.ID != old.ID {
		t.Errorf("taken key: %+v", rs[2])
	}
	st, err := o.OutboxStats(c)
	if err != nil || st.Depth != 2 || st.Oldest.IsZero() {
		t.Fatalf("stats %+v %v, want depth 2", st, err)
	}
	items, err := o.ClaimOutbox(c, "a", 10, time.Minute)
	if err != nil || len(items) != 2 {
		t.Fatalf("claim: %d items, %v", len(items), err)
	}
	if items[0].TaskID != rs[0].Task.ID || items[1].TaskID != rs[3].Task.ID {
		t.Errorf("claim order: %s %s", items[0].TaskID, items[1].TaskID)
	}
	if tk := items[0].Task; tk == nil || string(tk.Args) != `{"n":1}` || tk.State != ledger.Queued || items[0].Headers["traceparent"] != "00-1" {
		t.Errorf("claimed item: %+v task %+v", items[0], items[0].Task)
	}
	if tk := items[1].Task; tk == nil || tk.OrderingKey != "o" || tk.Lane != "interactive" || items[1].Headers != nil {
		t.Errorf("claimed item: %+v task %+v", items[1], items[1].Task)
	}
	if more, err := o.ClaimOutbox(c, "b", 10, time.Minute); err != nil || len(more) != 0 {
		t.Fatalf("a second owner claimed %d leased rows (%v)", len(more), err)
	}
	if err := o.ReleaseOutbox(c, "a", []string{items[0].TaskID}, 0, "broker down"); err != nil {
		t.Fatal(err)
	}
	again, err := o.ClaimOutbox(c, "b", 10, time.Minute)
	if err != nil || len(again) != 1 || again[0].TaskID != items[0].TaskID || again[0].Tries != 1 {
		t.Fatalf("claim after release: %+v %v", again, err)
	}
	// a no longer owns it: its Done deletes nothing.
	if err := o.DoneOutbox(c, "a", []string{items[0].TaskID}); err != nil {
		t.Fatal(err)
	}
	if st, _ := o.OutboxStats(c); st.Depth != 2 {
		t.Errorf("depth %d after a stale owner's Done, want 2", st.Depth)
	}
	if err := o.DoneOutbox(c, "b", []string{items[0].TaskID}); err != nil {
		t.Fatal(err)
	}
	if err := o.DoneOutbox(c, "a", []string{items[1].TaskID}); err != nil {
		t.Fatal(err)
	}
	if st, err := o.OutboxStats(c); err != nil || st.Depth != 0 || !st.Oldest.IsZero() {
		t.Errorf("stats after Done %+v %v, want empty", st, err)
	}
	if _, err := o.ClaimOutbox(c, "", 10, time.Minute); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("claim without owner: %v", err)
	}
}

// OutboxLease: a row CreateOutbox leased to its writer is not claimed by
// a relay until the lease passes (the writer died before settling it).
func OutboxLease(t *testing.T, mk Maker) {
	l := mk(t)
	o := outboxOf(t, l)
	c := ctx(t)
	rs, err := o.CreateOutbox(c, []ledger.OutboxTask{{Task: &ledger.Task{Kind: "k", Lane: "batch"}}}, "writer", 300*time.Millisecond)
	if err != nil || rs[0].Err != nil {
		t.Fatalf("%+v %v", rs, err)
	}
	if items, err := o.ClaimOutbox(c, "relay", 10, time.Minute); err != nil || len(items) != 0 {
		t.Fatalf("claimed a leased row: %d %v", len(items), err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		items, err := o.ClaimOutbox(c, "relay", 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) == 1 {
			if items[0].TaskID != rs[0].Task.ID {
				t.Fatalf("claimed %s", items[0].TaskID)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the row was not claimable after its lease")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The writer's late Done deletes nothing: the relay owns the row now.
	if err := o.DoneOutbox(c, "writer", []string{rs[0].Task.ID}); err != nil {
		t.Fatal(err)
	}
	if st, _ := o.OutboxStats(c); st.Depth != 1 {
		t.Errorf("depth %d, want 1", st.Depth)
	}
}

// OutboxRaceClaim: relays claiming at once get disjoint rows, and every
// row is claimed.
func OutboxRaceClaim(t *testing.T, mk Maker) {
	l := mk(t)
	o := outboxOf(t, l)
	c := ctx(t)
	const n = 60
	in := make([]ledger.OutboxTask, n)
	for i := range in {
		in[i] = ledger.OutboxTask{Task: &ledger.Task{Kind: "k", Lane: "batch"}}
	}
	if _, err := o.CreateOutbox(c, in, "", 0); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := string(rune('a' + w))
			for {
				items, err := o.ClaimOutbox(c, owner, 7, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(items) == 0 {
					return
				}
				mu.Lock()
				for _, it := range items {
					seen[it.TaskID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d rows claimed, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("row %s claimed %d times", id, k)
		}
	}
}

// OutboxTxType: CreateTx refuses a value that is not the store's
// transaction type with ErrTxType, as an invalid-input error.
func OutboxTxType(t *testing.T, mk Maker) {
	l := mk(t)
	o := outboxOf(t, l)
	for _, tx := range []any{nil, "tx", 42} {
		_, err := o.CreateTx(ctx(t), tx, []ledger.OutboxTask{{Task: &ledger.Task{Kind: "k", Lane: "batch"}}})
		if !errors.Is(err, ledger.ErrTxType) || !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("CreateTx(%T): %v", tx, err)
		}
	}
}

// OutboxOrdering: a row whose task has an ordering key is not claimed
// while an earlier row of the same key is leased to someone (being
// published), so tasks of one key reach the broker in outbox order however
// many relays run; rows of other keys and without one are not held up.
func OutboxOrdering(t *testing.T, mk Maker) {
	l := mk(t)
	o := outboxOf(t, l)
	c := ctx(t)
	rs, err := o.CreateOutbox(c, []ledger.OutboxTask{
		{Task: &ledger.Task{Kind: "k", Lane: "batch", OrderingKey: "acct-1"}},
		{Task: &ledger.Task{Kind: "k", Lane: "batch", OrderingKey: "acct-1"}},
		{Task: &ledger.Task{Kind: "k", Lane: "batch"}},
		{Task: &ledger.Task{Kind: "k", Lane: "batch", OrderingKey: "acct-2"}},
	}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	first, err := o.ClaimOutbox(c, "a", 1, time.Minute)
	if err != nil || len(first) != 1 || first[0].TaskID != rs[0].Task.ID {
		t.Fatalf("first claim: %+v %v", first, err)
	}
	others, err := o.ClaimOutbox(c, "b", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, it := range others {
		got[it.TaskID] = true
	}
	if len(others) != 2 || !got[rs[2].Task.ID] || !got[rs[3].Task.ID] {
		t.Fatalf("second claim took %d rows %v; want the unkeyed row and acct-2's, not acct-1's second", len(others), got)
	}
	if err := o.DoneOutbox(c, "a", []string{rs[0].Task.ID}); err != nil {
		t.Fatal(err)
	}
	last, err := o.ClaimOutbox(c, "b", 10, time.Minute)
	if err != nil || len(last) != 1 || last[0].TaskID != rs[1].Task.ID {
		t.Fatalf("claim after the first was published: %+v %v", last, err)
	}
}
