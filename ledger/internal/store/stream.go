package store

import (
	"math"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/ledger"
)

// StreamEntries checks AppendStream's arguments.
func StreamEntries(op, taskID string, attempt int, es []ledger.StreamEntry) error {
	if err := ID(op, taskID); err != nil {
		return err
	}
	if attempt < 0 {
		return Invalid(op, "attempt %d is negative", attempt)
	}
	if len(es) == 0 {
		return Invalid(op, "no entries")
	}
	if len(es) > ledger.MaxStreamBatch {
		return Invalid(op, "%d entries in one append; the limit is ledger.MaxStreamBatch (%d)", len(es), ledger.MaxStreamBatch)
	}
	for i := range es {
		e := &es[i]
		switch e.Kind {
		case ledger.StreamChunk:
			if len(e.Data) > ledger.MaxChunkBytes+ledger.SealOverhead {
				return Invalid(op, "chunk of %d bytes; the limit is ledger.MaxChunkBytes (%d, plus %d for a codec's seal)",
					len(e.Data), ledger.MaxChunkBytes, ledger.SealOverhead)
			}
		case ledger.StreamProgress:
			if math.IsNaN(e.Fraction) || e.Fraction < 0 || e.Fraction > 1 {
				return Invalid(op, "progress fraction %v is outside [0, 1]", e.Fraction)
			}
			if len(e.Message) > ledger.MaxProgressMessage {
				return Invalid(op, "progress message of %d bytes; the limit is ledger.MaxProgressMessage (%d)", len(e.Message), ledger.MaxProgressMessage)
			}
			if !utf8.ValidString(e.Message) {
				return Invalid(op, "progress message is not valid UTF-8")
			}
		default:
			return Invalid(op, "stream entry kind %q cannot be appended (progress or chunk)", e.Kind)
		}
	}
	return nil
}

// StreamLimit applies ReadStream's limit rule.
func StreamLimit(op string, after int64, limit int) (int, error) {
	if after < 0 {
		return 0, Invalid(op, "offset %d is negative", after)
	}
	switch {
	case limit < 0:
		return 0, Invalid(op, "limit %d is negative", limit)
	case limit == 0:
		return 100, nil
	case limit > 1000:
		return 1000, nil
	}
	return limit, nil
}

// ProgressIDs checks LatestProgress's IDs.
func ProgressIDs(op string, ids []string) error {
	if len(ids) > 1000 {
		return Invalid(op, "%d ids; the limit is 1000", len(ids))
	}
	for _, id := range ids {
		if err := ID(op, id); err != nil {
			return err
		}
	}
	return nil
}

// Wait checks PutWait's argument.
func Wait(op string, w *ledger.Wait) error {
	if err := ID(op, w.TaskID); err != nil {
		return err
	}
	if err := Key(op, "wait name", w.Name); err != nil {
		return err
	}
	if err := key(op, "correlation key", w.CorrelationKey); err != nil {
		return err
	}
	if err := key(op, "tenant", w.Tenant); err != nil {
		return err
	}
	if w.TokenHash != nil && len(w.TokenHash) != 32 {
		return Invalid(op, "token hash is %d bytes, want 32 (SHA-256)", len(w.TokenHash))
	}
	if w.Timeout < 0 {
		return Invalid(op, "timeout %v is negative", w.Timeout)
	}
	if w.State != "" && w.State != ledger.WaitPending {
		return Invalid(op, "a new wait is pending, not %q", w.State)
	}
	return nil
}

// WaitTarget checks SignalWait's target: exactly one selector.
func WaitTarget(op string, t ledger.WaitTarget) error {
	n := 0
	if t.TaskID != "" || t.Name != "" {
		if err := ID(op, t.TaskID); err != nil {
			return err
		}
		if err := Key(op, "wait name", t.Name); err != nil {
			return err
		}
		n++
	}
	if t.CorrelationKey != "" {
		if err := key(op, "correlation key", t.CorrelationKey); err != nil {
			return err
		}
		n++
	}
	if t.TokenHash != nil {
		if len(t.TokenHash) != 32 {
			return Invalid(op, "token hash is %d bytes, want 32", len(t.TokenHash))
		}
		n++
	}
	if n != 1 {
		return Invalid(op, "a signal names exactly one of: task and wait name, correlation key, token")
	}
	return key(op, "tenant", t.Tenant)
}
