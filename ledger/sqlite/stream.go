package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// AppendStream implements front.Backend: the entries take the next
// numbers of the task's event counter in one write, with a
// ledger.TopicStream note (a row of ledger_notes) in the same transaction.
func (s backend) AppendStream(ctx context.Context, op, taskID string, attempt int, es []ledger.StreamEntry) (int64, error) {
	now := s.opts.Now().UnixNano()
	var last int64
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		err := s.txQueryRow(ctx, tx, `UPDATE ledger_tasks SET event_seq = event_seq + ? WHERE id = ? RETURNING event_seq`, len(es), taskID).Scan(&last)
		if errors.Is(err, sql.ErrNoRows) {
			return store.NotFound(op, "task %s", taskID)
		}
		if err != nil {
			return err
		}
		first := last - int64(len(es)) + 1
		for i, e := range es {
			var data any
			if e.Kind == ledger.StreamChunk {
				data = e.Data
				if e.Data == nil {
					data = []byte{}
				}
			}
			if _, err := s.txExec(ctx, tx, `INSERT INTO ledger_stream (task_id, seq, at, kind, attempt, fraction, message, data)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, taskID, first+int64(i), now, string(e.Kind), attempt, e.Fraction, e.Message, data); err != nil {
				return err
			}
		}
		// The stream's followers wake on this note (ledger.TopicStream).
		_, err = s.txExec(ctx, tx, `INSERT INTO ledger_notes (at, topic, task_id, state, detail) VALUES (?, ?, ?, '', ?)`,
			now, ledger.TopicStream, taskID, strconv.FormatInt(last, 10))
		return err
	})
	if err != nil {
		return 0, err
	}
	return last, nil
}

// ReadStream implements front.Backend.
func (s backend) ReadStream(ctx context.Context, op, taskID string, after int64, limit int) ([]ledger.StreamEntry, error) {
	rows, err := s.rQuery(ctx, `SELECT seq, at, 'state', 0, from_state, to_state, reason, 0.0, '', NULL
			FROM (`+enqueuedEventSQL+`) WHERE seq > ?
		UNION ALL
		SELECT seq, at, 'state', 0, from_state, to_state, reason, 0.0, '', NULL
			FROM (`+heldEventsSQL+`) WHERE seq > ?
		UNION ALL
		SELECT seq, at, 'state', 0, from_state, to_state, reason, 0.0, '', NULL
			FROM ledger_events WHERE task_id = ? AND seq > ? AND to_state <> ''
		UNION ALL
		SELECT seq, at, kind, attempt, '', '', '', fraction, message, data
			FROM ledger_stream WHERE task_id = ? AND seq > ?
		ORDER BY 1 LIMIT ?`, taskID, taskID, after, taskID, taskID, after, taskID, after, taskID, after, limit)
	if err != nil {
		return nil, s.classify(op, err)
	}
	defer rows.Close()
	var out []ledger.StreamEntry
	for rows.Next() {
		e := ledger.StreamEntry{TaskID: taskID}
		var at int64
		var kind, from, to string
		if err := rows.Scan(&e.Offset, &at, &kind, &e.Attempt, &from, &to, &e.Reason, &e.Fraction, &e.Message, &e.Data); err != nil {
			return nil, s.classify(op, err)
		}
		e.At, e.Kind, e.From, e.State = time.Unix(0, at), ledger.StreamKind(kind), ledger.State(from), ledger.State(to)
		if e.Kind == ledger.StreamChunk && e.Data == nil {
			e.Data = []byte{}
		}
		out = append(out, e)
	}
	return out, s.classify(op, rows.Err())
}

// LatestProgress implements front.Backend.
func (s backend) LatestProgress(ctx context.Context, op string, ids []string, out map[string]ledger.StreamEntry) error {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := s.rQuery(ctx, `SELECT task_id, seq, at, attempt, fraction, message FROM ledger_stream p
		WHERE kind = 'progress' AND task_id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)
		AND seq = (SELECT MAX(seq) FROM ledger_stream WHERE task_id = p.task_id AND kind = 'progress')`, args...)
	if err != nil {
		return s.classify(op, err)
	}
	defer rows.Close()
	for rows.Next() {
		e := ledger.StreamEntry{Kind: ledger.StreamProgress}
		var at int64
		if err := rows.Scan(&e.TaskID, &e.Offset, &at, &e.Attempt, &e.Fraction, &e.Message); err != nil {
			return s.classify(op, err)
		}
		e.At = time.Unix(0, at)
		out[e.TaskID] = e
	}
	return s.classify(op, rows.Err())
}

// PruneStreams implements front.Backend, in batches like Prune.
func (s backend) PruneStreams(ctx context.Context, op string, before time.Time) (int, error) {
	terms := store.TerminalStates()
	args := []any{before.UnixNano()}
	for _, st := range terms {
		args = append(args, string(st))
	}
	args = append(args, pruneBatch)
	q := `DELETE FROM ledger_stream WHERE (task_id, seq) IN (SELECT s.task_id, s.seq FROM ledger_stream s
		JOIN ledger_tasks t ON t.id = s.task_id WHERE s.at < ? AND t.state IN (?` + strings.Repeat(", ?", len(terms)-1) + `) LIMIT ?)`
	total := 0
	for {
		var n int64
		err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
			res, err := s.txExec(ctx, tx, q, args...)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += int(n)
		if n < pruneBatch {
			return total, nil
		}
	}
}

const waitCols = `task_id, name, tenant, corr_key, token_hash, state, payload, timeout_ns, created_at, updated_at`

func scanWait(r interface{ Scan(...any) error }) (ledger.Wait, error) {
	var w ledger.Wait
	var state string
	var timeout, created, updated int64
	err := r.Scan(&w.TaskID, &w.Name, &w.Tenant, &w.CorrelationKey, &w.TokenHash, &state, &w.Payload, &timeout, &created, &updated)
	w.State, w.Timeout, w.CreatedAt, w.UpdatedAt = ledger.WaitState(state), time.Duration(timeout), time.Unix(0, created), time.Unix(0, updated)
	return w, err
}

// PutWait implements front.Backend.
func (s backend) PutWait(ctx context.Context, op string, w ledger.Wait) (ledger.Wait, bool, error) {
	now := s.opts.Now().UnixNano()
	var out ledger.Wait
	created := false
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		out, err = scanWait(s.txQueryRow(ctx, tx, `SELECT `+waitCols+` FROM ledger_waits WHERE task_id = ? AND name = ?`, w.TaskID, w.Name))
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if w.CorrelationKey != "" {
			var other string
			err := s.txQueryRow(ctx, tx, `SELECT task_id FROM ledger_waits WHERE tenant = ? AND corr_key = ? AND state = 'pending'`,
				w.Tenant, w.CorrelationKey).Scan(&other)
			if err == nil {
				return store.Conflictf(op, "correlation key %q is held by an open wait of task %s", w.CorrelationKey, other)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		var tok any
		if w.TokenHash != nil {
			tok = w.TokenHash
		}
		out, err = scanWait(s.txQueryRow(ctx, tx, `INSERT INTO ledger_waits (`+waitCols+`)
			VALUES (?, ?, ?, ?, ?, 'pending', NULL, ?, ?, ?) RETURNING `+waitCols,
			w.TaskID, w.Name, w.Tenant, w.CorrelationKey, tok, int64(w.Timeout), now, now))
		if err != nil && strings.Contains(err.Error(), "FOREIGN KEY") {
			return store.NotFound(op, "task %s", w.TaskID)
		}
		created = err == nil
		return err
	})
	if err != nil {
		return ledger.Wait{}, false, err
	}
	return out, created, nil
}

// GetWait implements front.Backend.
func (s backend) GetWait(ctx context.Context, op, taskID, name string) (ledger.Wait, error) {
	w, err := scanWait(s.rQueryRow(ctx, `SELECT `+waitCols+` FROM ledger_waits WHERE task_id = ? AND name = ?`, taskID, name))
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.Wait{}, store.NotFound(op, "wait %q of task %s", name, taskID)
	}
	return w, s.classify(op, err)
}

// FindWait implements front.Backend.
func (s backend) FindWait(ctx context.Context, op string, t ledger.WaitTarget) (ledger.Wait, error) {
	where, args := waitWhere(t)
	w, err := scanWait(s.rQueryRow(ctx, `SELECT `+waitCols+` FROM ledger_waits WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.Wait{}, store.NotFound(op, "no such wait")
	}
	return w, s.classify(op, err)
}

func waitWhere(t ledger.WaitTarget) (string, []any) {
	switch {
	case t.TaskID != "":
		return `task_id = ? AND name = ?`, []any{t.TaskID, t.Name}
	case t.CorrelationKey != "":
		// The open wait holding the key, else the newest that held it (a
		// second signal then finds it closed: a conflict, not a miss).
		return `tenant = ? AND corr_key = ? ORDER BY state <> 'pending', updated_at DESC LIMIT 1`, []any{t.Tenant, t.CorrelationKey}
	}
	return `token_hash = ?`, []any{t.TokenHash}
}

// MoveWait implements front.Backend: it moves the selected wait from
// pending to `to`.
func (s backend) MoveWait(ctx context.Context, op string, t ledger.WaitTarget, to ledger.WaitState, payload []byte) (ledger.Wait, error) {
	where, args := waitWhere(t)
	now := s.opts.Now().UnixNano()
	var pl any
	if payload != nil {
		pl = payload
	}
	var out ledger.Wait
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		w, err := scanWait(s.txQueryRow(ctx, tx, `SELECT `+waitCols+` FROM ledger_waits WHERE `+where, args...))
		if errors.Is(err, sql.ErrNoRows) {
			return store.NotFound(op, "no such wait")
		}
		if err != nil {
			return err
		}
		if t.TokenHash != nil && !bytes.Equal(w.TokenHash, t.TokenHash) {
			return store.NotFound(op, "no such wait")
		}
		if w.State != ledger.WaitPending {
			return store.Conflictf(op, "wait %q of task %s is %s", w.Name, w.TaskID, w.State)
		}
		out, err = scanWait(s.txQueryRow(ctx, tx, `UPDATE ledger_waits SET state = ?, payload = COALESCE(?, payload), updated_at = ?
			WHERE task_id = ? AND name = ? AND state = 'pending' RETURNING `+waitCols, string(to), pl, now, w.TaskID, w.Name))
		return err
	})
	if err != nil {
		return ledger.Wait{}, err
	}
	return out, nil
}
