package store

import (
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// History validates RecordHistory's arguments.
func History(op, server string, pts []ledger.HistoryPoint) error {
	if err := Key(op, "server id", server); err != nil {
		return err
	}
	if len(pts) > ledger.MaxHistoryPoints {
		return Invalid(op, "%d history points in one call, the limit is %d", len(pts), ledger.MaxHistoryPoints)
	}
	for i := range pts {
		p := &pts[i]
		if err := broker.ValidateName("lane", p.Lane); err != nil {
			return broker.Wrap(op, broker.Permanent, err)
		}
		if p.Processed < 0 || p.Failed < 0 || p.Dead < 0 {
			return Invalid(op, "history counts for lane %q are negative (%d, %d, %d)", p.Lane, p.Processed, p.Failed, p.Dead)
		}
		if y := p.Minute.Year(); y < 1970 || y > broker.MaxYear {
			return Invalid(op, "history minute %v is out of range (1970..%d)", p.Minute, broker.MaxYear)
		}
	}
	return nil
}

// UnixMinute is t's minute as minutes since the Unix epoch (times before
// 1970 count as minute 0).
func UnixMinute(t time.Time) int64 {
	return max(t.Unix(), 0) / 60
}

// MinuteTime is the time of Unix minute m, in UTC.
func MinuteTime(m int64) time.Time {
	return time.Unix(m*60, 0).UTC()
}

// HistoryRow is one point keyed for storage.
type HistoryRow struct {
	Minute                  int64
	Lane                    string
	Processed, Failed, Dead int64
}

// HistoryRows keys pts by Unix minute and lane; of two points for the
// same minute and lane the later one wins, as it would written one after
// the other.
func HistoryRows(pts []ledger.HistoryPoint) []HistoryRow {
	type k struct {
		m int64
		l string
	}
	at := make(map[k]int, len(pts))
	out := make([]HistoryRow, 0, len(pts))
	for _, p := range pts {
		r := HistoryRow{UnixMinute(p.Minute), p.Lane, p.Processed, p.Failed, p.Dead}
		if i, ok := at[k{r.Minute, r.Lane}]; ok {
			out[i] = r
			continue
		}
		at[k{r.Minute, r.Lane}] = len(out)
		out = append(out, r)
	}
	return out
}
