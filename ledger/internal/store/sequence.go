package store

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// The ledger's ordering Sequencer (broker.Sequencer) keeps one row per
// (lane, ordering key) and, for numbers finished out of turn, one row per
// number. Both stores run the same decisions, below, inside one
// transaction that holds the key's row.

// SeqStall is how long a key waits, beyond the lease, for a number that
// was assigned but has never been offered to a consumer (its publisher died
// between numbering and publishing, or the consumer that received it died
// before asking for its turn) before later numbers may start without it,
// and how long after a holder's lease ended it waits for that message to
// come back. A number given back unfinished (a retry) is never skipped: the
// key waits for it to finish or be dead-lettered.
const SeqStall = 30 * time.Second

// SeqKey is one key's row.
type SeqKey struct {
	// Assigned is the last number handed out; NextStart the number whose
	// turn it is (NextStart > Assigned: every number is finished).
	Assigned, NextStart int64
	// Running is the number holding the key (0: none) until Until.
	Running int64
	Until   time.Time
	// Progress is when the key last moved: a start, a finish, or the
	// numbering of NextStart while the key was idle.
	Progress time.Time
	// Started: NextStart has been granted at least once.
	Started bool
}

// SeqBase is the first number of a key's new row: the clock in
// microseconds, so that a key whose row was pruned and is numbered again
// never reuses a number a stray old copy might still carry.
func SeqBase(now time.Time) int64 {
	b := now.UnixMicro()
	if b < 1 {
		b = 1
	}
	return b
}

// SeqArgs validates a Sequencer call.
func SeqArgs(op, lane, key string, seq int64, needSeq bool) error {
	if err := broker.ValidateName("lane", lane); err != nil {
		return Invalid(op, "%v", err)
	}
	if err := Key(op, "ordering key", key); err != nil {
		return err
	}
	if needSeq && seq <= 0 {
		return Invalid(op, "ordering sequence %d is not positive", seq)
	}
	return nil
}

// SeqAcquire decides Acquire for k. isDone reports whether a number above
// NextStart has finished out of turn (it is asked only then); takeDone
// forgets a number finished out of turn, reporting whether it was one (it
// is asked only after a skip). write is true when k changed and must be
// stored.
//
// The stall window is counted beyond the asker's own lease (until - now):
// a number that was never offered may be held, unseen, by a consumer that
// received it and died before asking (its message was parked, or still in
// the batch being filtered). Such a message comes back only when its lease
// ends, and the consumers of a lane share their lease setting, so a key
// waits that lease plus the stall window before it calls the number lost.
//
// A skip passes over one number only. The numbers after it are still
// circulating (offered again every few seconds at most) or lost with it
// (a publisher died holding several); the next one gets SeqSkipGrace of
// the stall to show up before it is skipped too. Jumping straight to the
// asker would make every number between late, and late numbers start at
// once, out of order and side by side.
func SeqAcquire(k *SeqKey, seq int64, until, now time.Time, stall time.Duration, isDone, takeDone func(int64) (bool, error)) (g broker.Grant, write bool, err error) {
	switch {
	case seq > k.Assigned:
		return broker.GrantInvalid, false, nil
	case seq < k.NextStart:
		return broker.GrantLate, false, nil
	case seq > k.NextStart:
		done, err := isDone(seq)
		if err != nil {
			return 0, false, err
		}
		if done {
			return broker.GrantLate, false, nil
		}
		// Skip NextStart only when it is lost: numbered but never offered
		// (its publisher died before publishing, or the consumer that
		// received it died before asking) for its lease and the stall
		// window, or leased by a holder whose lease ended a stall window
		// ago without the message coming back (a broker's own delivery
		// limit moved it, or an operator purged it). A number given back
		// to wait for a retry (Release, not done) is never skipped,
		// however long the backoff.
		lease := max(until.Sub(now), 0)
		neverOffered := !k.Started && (k.Running == 0 || !now.Before(k.Until)) && now.Sub(k.Progress) > stall+lease
		neverBack := k.Started && k.Running == k.NextStart && now.Sub(k.Until) > stall
		if !neverOffered && !neverBack {
			return broker.GrantWait, false, nil
		}
		k.NextStart++
		k.Running, k.Started = 0, false
		// The next number is due within the grace (see above).
		k.Progress = now.Add(seqGrace(stall) - stall - lease)
		for k.NextStart < seq {
			taken, err := takeDone(k.NextStart)
			if err != nil {
				return 0, false, err
			}
			if !taken {
				break
			}
			k.NextStart++
		}
		if seq != k.NextStart {
			return broker.GrantWait, true, nil
		}
	}
	if k.Running != 0 && k.Running != seq && now.Before(k.Until) {
		return broker.GrantWait, write, nil
	}
	k.Running, k.Until, k.Progress, k.Started = seq, until, now, true
	return broker.GrantRun, true, nil
}

// SeqSkipGrace is the share of the stall window the number after a
// skipped one has to be offered before it is skipped too: the key's other
// messages are offered again every few seconds (Broker's OrderingRetry
// times their place in line, 5s at most by default), so a number not seen
// within it is most likely lost with the one before.
const SeqSkipGrace = 3

func seqGrace(stall time.Duration) time.Duration { return stall / SeqSkipGrace }

// SeqRelease applies Release to k. It returns markDone when seq finished
// out of turn and must be remembered, and advance when NextStart moved on
// (the caller then consumes remembered numbers: while NextStart is
// remembered, forget it and increment NextStart).
func SeqRelease(k *SeqKey, seq int64, done bool, now time.Time) (markDone, advance bool) {
	if k.Running == seq {
		k.Running = 0
	}
	k.Progress = now
	if !done || seq < k.NextStart || seq > k.Assigned {
		return false, false
	}
	if seq > k.NextStart {
		return true, false
	}
	k.NextStart++
	k.Started = false
	return false, true
}

// SeqTx is one store's access to a key's rows inside the transaction that
// holds the key (SQLite: the single writer's; PostgreSQL: the row locked
// with SELECT … FOR UPDATE). SeqAcquireTx and SeqReleaseTx run the same
// steps on both stores through it.
type SeqTx interface {
	// Load reads the key's row; ok is false when it has none.
	Load(ctx context.Context) (k SeqKey, ok bool, err error)
	// Save writes the key's row back.
	Save(ctx context.Context, k *SeqKey) error
	// IsDone reports whether seq finished out of turn.
	IsDone(ctx context.Context, seq int64) (bool, error)
	// MarkDone remembers that seq finished out of turn.
	MarkDone(ctx context.Context, seq int64) error
	// TakeDone forgets seq, reporting whether it was remembered.
	TakeDone(ctx context.Context, seq int64) (bool, error)
}

// SeqAcquireTx is broker.SequencerPosition's AcquirePosition on tx. A key
// without a row (numbered elsewhere — before an upgrade, by another
// sequencer — or pruned after every number finished) runs without
// ordering: nothing here can place it.
func SeqAcquireTx(ctx context.Context, tx SeqTx, seq int64, until, now time.Time, stall time.Duration) (broker.Grant, int64, error) {
	k, ok, err := tx.Load(ctx)
	if err != nil || !ok {
		return broker.GrantLate, 1, err
	}
	g, write, err := SeqAcquire(&k, seq, until, now, stall,
		func(n int64) (bool, error) { return tx.IsDone(ctx, n) },
		func(n int64) (bool, error) { return tx.TakeDone(ctx, n) })
	if err != nil {
		return 0, 0, err
	}
	ahead := int64(1)
	if g == broker.GrantWait {
		ahead = max(1, seq-k.NextStart)
	}
	if !write {
		return g, ahead, nil
	}
	return g, ahead, tx.Save(ctx, &k)
}

// SeqReleaseTx is broker.Sequencer's Release on tx.
func SeqReleaseTx(ctx context.Context, tx SeqTx, seq int64, done bool, now time.Time) error {
	k, ok, err := tx.Load(ctx)
	if err != nil || !ok {
		return err
	}
	mark, advance := SeqRelease(&k, seq, done, now)
	if mark {
		if err := tx.MarkDone(ctx, seq); err != nil {
			return err
		}
	}
	for advance {
		if advance, err = tx.TakeDone(ctx, k.NextStart); err != nil {
			return err
		}
		if advance {
			k.NextStart++
		}
	}
	return tx.Save(ctx, &k)
}
