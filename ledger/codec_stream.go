package ledger

import (
	"context"
	"strconv"
)

// The codec wrapper seals chunk data (bound to the task and the attempt
// that wrote it) and wait payloads (bound to the task and the wait's
// name). Progress messages, like event details, are not sealed.

func chunkAAD(taskID string, attempt int) []byte {
	return aad("chunk", taskID, strconv.Itoa(attempt))
}
func waitAAD(taskID, name string) []byte { return aad("wait", taskID, name) }

// SealOverhead is room the stores leave above MaxChunkBytes for a codec's
// seal: a chunk's plaintext is limited to MaxChunkBytes, its stored form to
// MaxChunkBytes+SealOverhead.
const SealOverhead = 1 << 10

func (l *codecLedger) AppendStream(ctx context.Context, taskID string, attempt int, es []StreamEntry) (int64, error) {
	sealed := make([]StreamEntry, len(es))
	for i, e := range es {
		if e.Kind == StreamChunk && len(e.Data) <= MaxChunkBytes {
			var err error
			if e.Data, err = l.seal(ctx, "chunk", e.Data, chunkAAD(taskID, attempt)); err != nil {
				return 0, err
			}
		}
		sealed[i] = e
	}
	return l.Ledger.AppendStream(ctx, taskID, attempt, sealed)
}

func (l *codecLedger) ReadStream(ctx context.Context, taskID string, after int64, limit int) ([]StreamEntry, error) {
	es, err := l.Ledger.ReadStream(ctx, taskID, after, limit)
	if err != nil {
		return nil, err
	}
	for i := range es {
		if es[i].Kind == StreamChunk {
			if es[i].Data, err = l.open(ctx, "chunk", es[i].Data, chunkAAD(taskID, es[i].Attempt)); err != nil {
				return nil, err
			}
		}
	}
	return es, nil
}

func (l *codecLedger) openWait(ctx context.Context, w Wait, err error) (Wait, error) {
	if err != nil {
		return w, err
	}
	w.Payload, err = l.open(ctx, "wait "+w.Name+" payload", w.Payload, waitAAD(w.TaskID, w.Name))
	return w, err
}

func (l *codecLedger) PutWait(ctx context.Context, w Wait) (Wait, bool, error) {
	out, created, err := l.Ledger.PutWait(ctx, w)
	out, err = l.openWait(ctx, out, err)
	return out, created, err
}

func (l *codecLedger) GetWait(ctx context.Context, taskID, name string) (Wait, error) {
	w, err := l.Ledger.GetWait(ctx, taskID, name)
	return l.openWait(ctx, w, err)
}

func (l *codecLedger) FindWait(ctx context.Context, t WaitTarget) (Wait, error) {
	w, err := l.Ledger.FindWait(ctx, t)
	return l.openWait(ctx, w, err)
}

func (l *codecLedger) ExpireWait(ctx context.Context, taskID, name string) (Wait, error) {
	w, err := l.Ledger.ExpireWait(ctx, taskID, name)
	return l.openWait(ctx, w, err)
}

// SignalWait seals the payload for the wait it names by task; a signal by
// correlation key or token finds the wait first, to bind the seal to it.
func (l *codecLedger) SignalWait(ctx context.Context, t WaitTarget, payload []byte) (Wait, error) {
	if len(payload) > 0 && t.TaskID == "" {
		w, err := l.Ledger.FindWait(ctx, t)
		if err != nil {
			return Wait{}, err
		}
		t = WaitTarget{TaskID: w.TaskID, Name: w.Name}
	}
	sealed, err := l.seal(ctx, "wait payload", payload, waitAAD(t.TaskID, t.Name))
	if err != nil {
		return Wait{}, err
	}
	w, err := l.Ledger.SignalWait(ctx, t, sealed)
	return l.openWait(ctx, w, err)
}
