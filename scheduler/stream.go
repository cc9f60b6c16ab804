package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Progress and streamed output. A handler reports progress (Progress) and
// streams chunks (Emit) into the ledger's per-task stream, beside the
// task's events and never on the task broker; readers follow it with
// ledger.StreamStore.ReadStream (switchyard's Client.Watch). Each call is
// one ledger write, acknowledged before it returns: a chunk Emit returned
// for survives a crash of the worker.

// LimitError names the limit an oversized chunk or progress message
// crossed. It comes wrapped in a permanent broker error of kind
// broker.ErrTooLarge.
type LimitError struct {
	// Limit is the limit's name ("ledger.MaxChunkBytes").
	Limit string
	// Max is the limit, Size what was given, in bytes.
	Max, Size int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%d bytes is above %s (%d bytes)", e.Size, e.Limit, e.Max)
}

// ErrNoStream is returned by Progress and Emit without a ledger: there is
// nowhere to keep the stream.
var ErrNoStream = errors.New("scheduler: progress and streams need a ledger")

func tooLarge(op, limit string, maxN, size int) error {
	return &broker.Error{Op: op, Class: broker.Permanent, Kind: broker.ErrTooLarge, Err: &LimitError{Limit: limit, Max: maxN, Size: size}}
}

// Progress records the running task's progress: fraction in [0, 1] and a
// short message (at most ledger.MaxProgressMessage bytes of UTF-8).
func Progress(ctx context.Context, fraction float64, message string) error {
	const op = "switchyard: progress"
	rs := stateOf(ctx)
	if rs == nil {
		return ErrNotInTask
	}
	if math.IsNaN(fraction) || fraction < 0 || fraction > 1 {
		return broker.KindError(op, broker.Permanent, broker.ErrInvalid, "fraction %v is outside [0, 1]", fraction)
	}
	if len(message) > ledger.MaxProgressMessage {
		return tooLarge(op, "ledger.MaxProgressMessage", ledger.MaxProgressMessage, len(message))
	}
	if !utf8.ValidString(message) {
		return broker.KindError(op, broker.Permanent, broker.ErrInvalid, "message is not valid UTF-8")
	}
	return rs.appendStream(ctx, ledger.StreamEntry{Kind: ledger.StreamProgress, Fraction: fraction, Message: message})
}

// Emit appends chunk to the running task's output stream (at most
// ledger.MaxChunkBytes; a larger one is refused with a *LimitError and
// nothing is written). Readers get the chunks in order, each once.
func Emit(ctx context.Context, chunk []byte) error {
	rs := stateOf(ctx)
	if rs == nil {
		return ErrNotInTask
	}
	if len(chunk) > ledger.MaxChunkBytes {
		return tooLarge("switchyard: emit", "ledger.MaxChunkBytes", ledger.MaxChunkBytes, len(chunk))
	}
	return rs.appendStream(ctx, ledger.StreamEntry{Kind: ledger.StreamChunk, Data: chunk})
}

func (rs *runState) appendStream(ctx context.Context, e ledger.StreamEntry) error {
	L := rs.s.cfg.Ledger
	if L == nil {
		return ErrNoStream
	}
	_, err := L.AppendStream(ctx, rs.task, rs.attempt, []ledger.StreamEntry{e})
	return err
}

// StreamWriter batches a handler's chunks: each Write is one chunk, and
// the chunks written within Interval go to the ledger in one append (one
// transaction) instead of one each. Readers see them in order and each
// once, as with Emit; what a crash loses is what was written in the last
// Interval and not yet flushed. Use it for output faster than the ledger's
// commit rate (see docs/BENCHMARKS.md, "Task streams"). Close flushes.
type StreamWriter struct {
	rs       *runState
	ctx      context.Context
	interval time.Duration

	mu    sync.Mutex
	buf   []ledger.StreamEntry
	bytes int
	timer *time.Timer
	err   error // the first failed flush's; returned by every later call
}

// NewStreamWriter returns a StreamWriter for the running task of ctx
// flushing every interval (0: 50ms).
func NewStreamWriter(ctx context.Context, interval time.Duration) (*StreamWriter, error) {
	rs := stateOf(ctx)
	if rs == nil {
		return nil, ErrNotInTask
	}
	if rs.s.cfg.Ledger == nil {
		return nil, ErrNoStream
	}
	if interval <= 0 {
		interval = 50 * time.Millisecond
	}
	return &StreamWriter{rs: rs, ctx: ctx, interval: interval}, nil
}

// Write queues p as one chunk (at most ledger.MaxChunkBytes; a larger one
// is refused with a *LimitError) and returns len(p), or the error of an
// earlier flush.
func (w *StreamWriter) Write(p []byte) (int, error) {
	if len(p) > ledger.MaxChunkBytes {
		return 0, tooLarge("switchyard: stream write", "ledger.MaxChunkBytes", ledger.MaxChunkBytes, len(p))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	w.buf = append(w.buf, ledger.StreamEntry{Kind: ledger.StreamChunk, Data: append([]byte(nil), p...)})
	w.bytes += len(p)
	if len(w.buf) >= ledger.MaxStreamBatch || w.bytes >= 4*ledger.MaxChunkBytes {
		return len(p), w.flushLocked()
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(w.interval, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.timer = nil
			_ = w.flushLocked()
		})
	}
	return len(p), nil
}

// Flush writes the queued chunks now.
func (w *StreamWriter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

// Close flushes and stops the timer. Later Writes fail.
func (w *StreamWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.flushLocked()
	if w.err == nil {
		w.err = errors.New("switchyard: stream writer closed")
	}
	return err
}

func (w *StreamWriter) flushLocked() error {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if w.err != nil || len(w.buf) == 0 {
		return w.err
	}
	_, err := w.rs.s.cfg.Ledger.AppendStream(context.WithoutCancel(w.ctx), w.rs.task, w.rs.attempt, w.buf)
	w.buf, w.bytes = w.buf[:0], 0
	if err != nil {
		w.err = err
	}
	return err
}
