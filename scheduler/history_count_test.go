package scheduler

import (
	"testing"
	"time"
)

// TestHistory_PendingWritten: counts go to the current minute's bucket;
// pending lists the changed buckets; written clears them, keeps a bucket
// counted again meanwhile dirty, forgets written buckets older than the
// previous minute, and the number of buckets stays bounded.
func TestHistory_PendingWritten(t *testing.T) {
	t.Parallel()
	var h history
	m0 := time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC)
	h.count(m0, "batch", true, false, false)
	h.count(m0.Add(10*time.Second), "batch", true, true, true)
	h.count(m0, "interactive", false, false, true)
	pts := h.pending()
	if len(pts) != 2 {
		t.Fatalf("pending = %+v", pts)
	}
	for _, p := range pts {
		if !p.Minute.Equal(m0.Truncate(time.Minute)) {
			t.Errorf("minute %v", p.Minute)
		}
		if p.Lane == "batch" && (p.Processed != 2 || p.Failed != 1 || p.Dead != 1) ||
			p.Lane == "interactive" && (p.Processed != 0 || p.Failed != 0 || p.Dead != 1) {
			t.Errorf("point %+v", p)
		}
	}
	h.count(m0, "batch", true, false, false) // counted while the write was under way
	h.written(pts, m0)
	if got := h.pending(); len(got) != 1 || got[0].Lane != "batch" || got[0].Processed != 3 {
		t.Fatalf("pending after written = %+v, want batch with 3 processed", got)
	}
	// Two minutes later, writing them forgets every written bucket: their
	// totals are final.
	h.written(h.pending(), m0.Add(2*time.Minute))
	if len(h.buckets) != 0 || len(h.pending()) != 0 {
		t.Errorf("buckets after the final write: %v", h.buckets)
	}
	// Bounded while the ledger refuses every write.
	var g history
	for i := range maxHistoryBuckets + 10 {
		g.count(m0.Add(time.Duration(i)*time.Minute), "batch", true, false, false)
	}
	if len(g.buckets) != maxHistoryBuckets || g.dropped != 10 {
		t.Errorf("buckets %d dropped %d, want %d and 10", len(g.buckets), g.dropped, maxHistoryBuckets)
	}
}

// BenchmarkHistory_Count is the cost a finished task pays for the
// history: one mutex and a map lookup.
func BenchmarkHistory_Count(b *testing.B) {
	var h history
	now := time.Now()
	lanes := []string{"interactive", "scheduled", "batch"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			h.count(now, lanes[i%3], true, false, false)
			i++
		}
	})
}
