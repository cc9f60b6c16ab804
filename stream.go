package switchyard

import (
	"context"
	"iter"
	"strconv"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Progress records the running task's progress (fraction in [0, 1], a
// short message) in the ledger; Watch and the admin API's event stream
// show it. It needs a ledger and the handler's context.
func Progress(ctx context.Context, fraction float64, message string) error {
	return scheduler.Progress(ctx, fraction, message)
}

// Emit appends chunk (model tokens, log lines) to the running task's output
// stream in the ledger, never on the task broker: one ledger write per
// call, done before Emit returns. A chunk above ledger.MaxChunkBytes is
// refused with a *scheduler.LimitError naming the limit. Watch yields the
// chunks in order, each once, across reconnects.
func Emit(ctx context.Context, chunk []byte) error { return scheduler.Emit(ctx, chunk) }

// StreamWriter batches a handler's chunks into one ledger append per
// interval; see scheduler.StreamWriter.
type StreamWriter = scheduler.StreamWriter

// NewStreamWriter returns an io.Writer for the running task's output
// stream: each Write is one chunk, and the chunks of each interval (0:
// 50ms) are written to the ledger together. Close it before the handler
// returns.
func NewStreamWriter(ctx context.Context, interval time.Duration) (*StreamWriter, error) {
	return scheduler.NewStreamWriter(ctx, interval)
}

// LimitError names the limit an oversized chunk or message crossed.
type LimitError = scheduler.LimitError

// WatchEvent is one entry of a task's stream: a state change, a progress
// report or a chunk of output.
type WatchEvent struct {
	// Offset is the entry's place in the task's stream: pass the last one
	// seen to Watch to resume after it.
	Offset int64
	// Kind is ledger.StreamState, ledger.StreamProgress or
	// ledger.StreamChunk.
	Kind ledger.StreamKind
	At   time.Time
	// Attempt is the attempt that wrote a progress report or chunk.
	Attempt int

	// A state change: From → State, with the ledger's reason code.
	From, State ledger.State
	Reason      string

	// A progress report.
	Fraction float64
	Message  string

	// A chunk.
	Data []byte
}

// WatchOpts tune Watch. A nil *WatchOpts means the defaults.
type WatchOpts struct {
	// Interval is how often Watch reads the ledger when nothing woke it.
	// On a ledger with notes (ledger.Notes: both SQL stores) Watch reads
	// when a note says the task's stream grew or the task finished, and at
	// Interval only as a safety net, for the state changes the stores do
	// not note (queued → running, retries): defaults to 1s there. On a
	// ledger without notes Watch polls at Interval: defaults to 100ms.
	Interval time.Duration
	// Follow keeps watching after the task reached a terminal state (a
	// dead or failed task may be replayed). Defaults to false: Watch ends
	// once the task is terminal and its stream is read. With notes, a
	// task followed once terminal is marked watched all the same
	// (ledger.Watcher.FollowTask), so that the end of a later run wakes
	// the watcher at once.
	Follow bool
}

// Watch yields task id's state changes, progress reports and chunks in the
// order they were written, starting after offset from (0: from the
// beginning). It reads the ledger a page at a time from the last offset
// it yielded, so a watcher that reconnects with the last Offset it saw
// gets every later entry exactly once, from any process. Once it has
// caught up it waits for the ledger's notes (ledger.Notes): each append
// to the task's stream sends one in its transaction, so a chunk reaches a
// watcher in another process as soon as the note does (PostgreSQL
// NOTIFY; the SQLite store's notes poller, every 50ms by default) — see
// docs/BENCHMARKS.md, "Task streams". A note that says notes were lost
// (ledger.TopicGap), or a ledger without notes, makes it read again; see
// WatchOpts.Interval. It ends when the task has reached a terminal state
// and everything before it is read, when ctx ends (yielding ctx's
// error), or on an error (an unknown task is ledger.ErrNotFound). It
// needs a ledger.
func (c *Client) Watch(ctx context.Context, id string, from int64, opts *WatchOpts) iter.Seq2[WatchEvent, error] {
	return func(yield func(WatchEvent, error) bool) {
		if c.l == nil {
			yield(WatchEvent{}, ErrNoLedger)
			return
		}
		var o WatchOpts
		if opts != nil {
			o = *opts
		}
		// Listen before the first read, so that nothing appended after
		// it goes unheard. A ledger without notes, or one whose Listen
		// fails, is polled.
		var notes <-chan ledger.Note
		if n, ok := ledger.NotesOf(c.l); ok {
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if ch, err := n.Listen(lctx); err == nil {
				notes = ch
			}
		}
		if o.Interval <= 0 {
			o.Interval = 100 * time.Millisecond
			if notes != nil {
				o.Interval = time.Second
			}
		}
		const page = 500
		// The task's state is read once, then followed in the stream
		// itself (its state changes are entries); it is read again only
		// now and then while the stream is idle (a task pruned meanwhile
		// ends the watch with ErrNotFound).
		// With notes, that read marks the task watched (ledger.Watcher),
		// so that the store sends its state notes; with Follow, a task
		// already terminal too (FollowTask), since a replay's end is
		// still to be heard.
		get := c.l.Get
		if w, ok := ledger.WatcherOf(c.l); ok && notes != nil {
			get = w.WatchTask
			if o.Follow {
				get = w.FollowTask
			}
		}
		t, err := get(ctx, id)
		if err != nil {
			yield(WatchEvent{}, err)
			return
		}
		terminal := t.State.Terminal()
		off := from
		timer := time.NewTimer(o.Interval)
		defer timer.Stop()
		idle := time.Duration(0)
		for {
			es, err := c.l.ReadStream(ctx, id, off, page)
			if err != nil {
				yield(WatchEvent{}, err)
				return
			}
			for _, e := range es {
				off = e.Offset
				if e.Kind == ledger.StreamState {
					terminal = e.State.Terminal()
				}
				if !yield(watchEvent(e), nil) {
					return
				}
			}
			if len(es) == page {
				continue
			}
			if terminal && !o.Follow {
				return
			}
			if len(es) > 0 {
				idle = 0
			} else if idle += o.Interval; idle >= 2*time.Second {
				idle = 0
				if t, err := c.l.Get(ctx, id); err != nil {
					yield(WatchEvent{}, err)
					return
				} else if t.State.Terminal() && !o.Follow {
					// Its end is before from: nothing more will come.
					return
				}
			}
			timer.Reset(o.Interval)
			var werr error
			if notes, werr = waitStream(ctx, notes, timer.C, id, off); werr != nil {
				yield(WatchEvent{}, werr)
				return
			}
		}
	}
}

// waitStream waits until task id's stream may hold entries past off: a
// note about the task (a stream note past off, a state note) or a gap on
// notes, or tick. The notes already queued are taken at once, so a burst
// costs one read. A closed notes channel (the ledger closed, or its
// listener stopped) is returned as nil: Watch polls from then on. It
// returns ctx's error when ctx ends.
func waitStream(ctx context.Context, notes <-chan ledger.Note, tick <-chan time.Time, id string, off int64) (<-chan ledger.Note, error) {
	wake := false
	take := func(n ledger.Note) {
		switch {
		case n.Topic == ledger.TopicGap:
			wake = true
		case n.TaskID != id:
		case n.Topic == ledger.TopicStream:
			if last, err := strconv.ParseInt(n.Detail, 10, 64); err != nil || last > off {
				wake = true
			}
		default:
			wake = true
		}
	}
	for !wake {
		select {
		case <-ctx.Done():
			return notes, ctx.Err()
		case <-tick:
			return notes, nil
		case n, ok := <-notes:
			if !ok {
				return nil, nil
			}
			take(n)
		}
	}
	for {
		select {
		case n, ok := <-notes:
			if !ok {
				return nil, nil
			}
			take(n)
		default:
			return notes, nil
		}
	}
}

func watchEvent(e ledger.StreamEntry) WatchEvent {
	return WatchEvent{Offset: e.Offset, Kind: e.Kind, At: e.At, Attempt: e.Attempt, From: e.From, State: e.State, Reason: e.Reason,
		Fraction: e.Fraction, Message: e.Message, Data: e.Data}
}

// LatestProgress returns the newest progress report of each of ids that
// has one (for listings of running tasks). It needs a ledger.
func (c *Client) LatestProgress(ctx context.Context, ids []string) (map[string]WatchEvent, error) {
	if c.l == nil {
		return nil, ErrNoLedger
	}
	m, err := c.l.LatestProgress(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]WatchEvent, len(m))
	for id, e := range m {
		out[id] = watchEvent(e)
	}
	return out, nil
}
