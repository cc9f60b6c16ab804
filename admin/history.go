package admin

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// DefaultHistoryMinutes is how many minutes History covers by default;
// MaxHistoryMinutes the most it covers (the ledger keeps
// ledger.HistoryKeep).
const (
	DefaultHistoryMinutes = 60
	MaxHistoryMinutes     = int(ledger.HistoryKeep / time.Minute)
)

// HistorySeries is one lane's counts (or every lane's, in
// HistoryInfo.Total), one entry per minute from HistoryInfo.From on.
// The CLI's --json and GET /api/v1/history print it as it is.
type HistorySeries struct {
	Lane      string  `json:"lane,omitempty"`
	Processed []int64 `json:"processed"`
	Failed    []int64 `json:"failed"`
	Dead      []int64 `json:"dead"`
	// Sums over the minutes.
	ProcessedTotal int64 `json:"processed_total"`
	FailedTotal    int64 `json:"failed_total"`
	DeadTotal      int64 `json:"dead_total"`
}

// HistoryInfo is History's answer: the task counts per lane over the
// last Minutes minutes, the current one included (still counting).
type HistoryInfo struct {
	Minutes int `json:"minutes"`
	// From is the start of the first minute, To the end of the last
	// (UTC); StepMS is the width of one entry.
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	StepMS float64   `json:"step_ms"`
	// Lanes has a series for every lane with counts in the range (and
	// for the lane asked for), by name; Total sums them.
	Lanes []HistorySeries `json:"lanes"`
	Total HistorySeries   `json:"total"`
}

// History returns the processed / failed / dead counts per lane and
// minute over the last minutes (DefaultHistoryMinutes when 0, at most
// MaxHistoryMinutes) as the servers recorded them in the ledger
// (ledger.History): what the dashboard charts. lane "" means every lane;
// another must be known (ErrUnknownLane). Without a ledger it returns
// ErrNoLedger; with a ledger that keeps no history, an error matching
// broker.ErrUnsupported. The counts cover every tenant.
func (o *Ops) History(ctx context.Context, lane string, minutes int) (*HistoryInfo, error) {
	switch {
	case minutes == 0:
		minutes = DefaultHistoryMinutes
	case minutes < 0 || minutes > MaxHistoryMinutes:
		return nil, broker.Invalidf("minutes must be within 1..%d (the ledger keeps %s of history), got %d", MaxHistoryMinutes, ledger.HistoryKeep, minutes)
	}
	if lane != "" {
		if err := o.knownLane(ctx, lane); err != nil {
			return nil, err
		}
	}
	if o.cfg.Ledger == nil {
		return nil, ErrNoLedger
	}
	hs := ledger.HistoryOf(o.cfg.Ledger)
	if hs == nil {
		return nil, &broker.Error{Op: "admin: history", Class: broker.Permanent, Kind: broker.ErrUnsupported,
			Err: fmt.Errorf("the ledger (%T) keeps no task history (ledger.History)", o.cfg.Ledger)}
	}
	to := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	from := to.Add(-time.Duration(minutes) * time.Minute)
	pts, err := hs.ListHistory(ctx, from, lane)
	if err != nil {
		return nil, err
	}
	info := &HistoryInfo{Minutes: minutes, From: from, To: to, StepMS: ms(time.Minute), Total: newSeries("", minutes)}
	byLane := map[string]*HistorySeries{}
	if lane != "" {
		s := newSeries(lane, minutes)
		byLane[lane] = &s
	}
	for _, p := range pts {
		i := int(p.Minute.Sub(from) / time.Minute)
		if i < 0 || i >= minutes {
			continue // a server whose clock runs ahead
		}
		s := byLane[p.Lane]
		if s == nil {
			n := newSeries(p.Lane, minutes)
			s = &n
			byLane[p.Lane] = s
		}
		s.add(i, p)
		info.Total.add(i, p)
	}
	for _, s := range byLane {
		info.Lanes = append(info.Lanes, *s)
	}
	slices.SortFunc(info.Lanes, func(a, b HistorySeries) int {
		switch {
		case a.Lane < b.Lane:
			return -1
		case a.Lane > b.Lane:
			return 1
		}
		return 0
	})
	if info.Lanes == nil {
		info.Lanes = []HistorySeries{}
	}
	return info, nil
}

func newSeries(lane string, n int) HistorySeries {
	return HistorySeries{Lane: lane, Processed: make([]int64, n), Failed: make([]int64, n), Dead: make([]int64, n)}
}

func (s *HistorySeries) add(i int, p ledger.HistoryPoint) {
	s.Processed[i] += p.Processed
	s.Failed[i] += p.Failed
	s.Dead[i] += p.Dead
	s.ProcessedTotal += p.Processed
	s.FailedTotal += p.Failed
	s.DeadTotal += p.Dead
}
