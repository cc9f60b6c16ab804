package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// AppendStream implements front.Backend: one statement takes the next
// numbers of the task's event counter (under the task row's lock, so
// entries commit in number order), inserts the entries and sends a
// ledger.TopicStream note (NOTIFY, delivered when the statement commits).
func (s backend) AppendStream(ctx context.Context, op string, taskID string, attempt int, es []ledger.StreamEntry) (int64, error) {
	kinds := make([]string, len(es))
	fracs := make([]float64, len(es))
	msgs := make([]string, len(es))
	datas := make([][]byte, len(es))
	for i, e := range es {
		kinds[i], fracs[i], msgs[i] = string(e.Kind), e.Fraction, e.Message
		if e.Kind == ledger.StreamChunk {
			datas[i] = e.Data
			if datas[i] == nil {
				datas[i] = []byte{}
			}
		}
	}
	channel, err := s.noteChannel(ctx, s.pool)
	if err != nil {
		return 0, classify(op, err, true)
	}
	var last int64
	err = s.queryRow(ctx, `WITH u AS (
			UPDATE ledger_tasks SET event_seq = event_seq + $2 WHERE id = $1 RETURNING event_seq),
		ins AS (INSERT INTO ledger_stream (task_id, seq, at, kind, attempt, fraction, message, data)
			SELECT $1, u.event_seq - $2 + e.ord, $3, e.kind, $4, e.fraction, e.message, e.data
			FROM u, unnest($5::text[], $6::float8[], $7::text[], $8::bytea[]) WITH ORDINALITY AS e(kind, fraction, message, data, ord))
		SELECT u.event_seq FROM u CROSS JOIN LATERAL pg_notify($9, $10 || u.event_seq) AS n`, func(r pgx.Row) error { return r.Scan(&last) },
		taskID, len(es), s.opts.Now(), attempt, kinds, fracs, msgs, datas, channel, ledger.EncodeNote(ledger.Note{Topic: ledger.TopicStream, TaskID: taskID}))
	if isNoRows(err) {
		return 0, store.NotFound(op, "task %s", taskID)
	}
	if err != nil {
		return 0, classify(op, err, true)
	}
	return last, nil
}

// ReadStream implements front.Backend.
func (s backend) ReadStream(ctx context.Context, op string, taskID string, after int64, limit int) ([]ledger.StreamEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, at, 'state', 0, from_state, to_state, reason, 0::float8, '', NULL::bytea
			FROM (`+enqueuedEventSQL+`) d WHERE seq > $2
		UNION ALL
		SELECT seq, at, 'state', 0, from_state, to_state, reason, 0::float8, '', NULL::bytea
			FROM (`+startEventSQL+`) r WHERE seq > $2
		UNION ALL
		SELECT seq, at, 'state', 0, from_state, to_state, reason, 0::float8, '', NULL::bytea
			FROM (`+endEventSQL+`) x WHERE seq > $2 AND to_state <> ''
		UNION ALL
		SELECT seq, at, 'state', 0, from_state, to_state, reason, 0::float8, '', NULL::bytea
			FROM ledger_events WHERE task_id = $1 AND seq > $2 AND to_state <> ''
		UNION ALL
		SELECT seq, at, kind, attempt, '', '', '', fraction, message, data
			FROM ledger_stream WHERE task_id = $1 AND seq > $2
		ORDER BY 1 LIMIT $3`, taskID, after, limit)
	if err != nil {
		return nil, classify(op, err, false)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.StreamEntry, error) {
		e := ledger.StreamEntry{TaskID: taskID}
		var kind, from, to string
		err := r.Scan(&e.Offset, &e.At, &kind, &e.Attempt, &from, &to, &e.Reason, &e.Fraction, &e.Message, &e.Data)
		e.Kind, e.From, e.State = ledger.StreamKind(kind), ledger.State(from), ledger.State(to)
		if e.Kind == ledger.StreamChunk && e.Data == nil {
			e.Data = []byte{}
		}
		return e, err
	})
	return out, classify(op, err, false)
}

// LatestProgress implements front.Backend.
func (s backend) LatestProgress(ctx context.Context, op string, ids []string, out map[string]ledger.StreamEntry) error {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (task_id) task_id, seq, at, attempt, fraction, message
		FROM ledger_stream WHERE kind = 'progress' AND task_id = ANY($1::text[]) ORDER BY task_id, seq DESC`, ids)
	if err != nil {
		return classify(op, err, false)
	}
	es, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.StreamEntry, error) {
		e := ledger.StreamEntry{Kind: ledger.StreamProgress}
		err := r.Scan(&e.TaskID, &e.Offset, &e.At, &e.Attempt, &e.Fraction, &e.Message)
		return e, err
	})
	if err != nil {
		return classify(op, err, false)
	}
	for _, e := range es {
		out[e.TaskID] = e
	}
	return nil
}

// PruneStreams implements front.Backend, in batches like Prune.
func (s backend) PruneStreams(ctx context.Context, op string, before time.Time) (int, error) {
	var terms []string
	for _, st := range store.TerminalStates() {
		terms = append(terms, string(st))
	}
	total := 0
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM ledger_stream WHERE (task_id, seq) IN (
			SELECT s.task_id, s.seq FROM ledger_stream s JOIN ledger_tasks t ON t.id = s.task_id
			WHERE s.at < $1 AND t.state = ANY($2::text[]) LIMIT $3)`, before, terms, pruneBatch)
		if err != nil {
			return total, classify(op, err, true)
		}
		total += int(tag.RowsAffected())
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}

const waitCols = `task_id, name, tenant, corr_key, token_hash, state, payload, timeout_ns, created_at, updated_at`

func scanWait(r pgx.Row) (ledger.Wait, error) {
	var w ledger.Wait
	var state string
	var timeout int64
	err := r.Scan(&w.TaskID, &w.Name, &w.Tenant, &w.CorrelationKey, &w.TokenHash, &state, &w.Payload, &timeout, &w.CreatedAt, &w.UpdatedAt)
	w.State, w.Timeout = ledger.WaitState(state), time.Duration(timeout)
	return w, err
}

func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// PutWait implements front.Backend.
func (s backend) PutWait(ctx context.Context, op string, w ledger.Wait) (ledger.Wait, bool, error) {
	now := s.opts.Now()
	var out ledger.Wait
	err := s.queryRow(ctx, `INSERT INTO ledger_waits (`+waitCols+`)
		VALUES ($1, $2, $3, $4, $5, 'pending', NULL, $6, $7, $7)
		ON CONFLICT (task_id, name) DO NOTHING RETURNING `+waitCols,
		func(r pgx.Row) (err error) { out, err = scanWait(r); return err },
		w.TaskID, w.Name, w.Tenant, w.CorrelationKey, w.TokenHash, int64(w.Timeout), now)
	switch {
	case err == nil:
		return out, true, nil
	case isFK(err):
		return ledger.Wait{}, false, store.NotFound(op, "task %s", w.TaskID)
	case isUnique(err):
		return ledger.Wait{}, false, store.Conflictf(op, "correlation key %q is held by an open wait", w.CorrelationKey)
	case !isNoRows(err):
		return ledger.Wait{}, false, classify(op, err, true)
	}
	out, err = scanWait(s.pool.QueryRow(ctx, `SELECT `+waitCols+` FROM ledger_waits WHERE task_id = $1 AND name = $2`, w.TaskID, w.Name))
	return out, false, classify(op, err, false)
}

// GetWait implements front.Backend.
func (s backend) GetWait(ctx context.Context, op string, taskID, name string) (ledger.Wait, error) {
	w, err := scanWait(s.pool.QueryRow(ctx, `SELECT `+waitCols+` FROM ledger_waits WHERE task_id = $1 AND name = $2`, taskID, name))
	if isNoRows(err) {
		return ledger.Wait{}, store.NotFound(op, "wait %q of task %s", name, taskID)
	}
	return w, classify(op, err, false)
}

// MoveWait implements front.Backend: it moves the selected wait from
// pending to `to` with one guarded UPDATE; when none moved, a wait that
// exists but is closed is a conflict.
func (s backend) MoveWait(ctx context.Context, op string, t ledger.WaitTarget, to ledger.WaitState, payload []byte) (ledger.Wait, error) {
	var where string
	var args []any
	switch {
	case t.TaskID != "":
		where, args = `task_id = $4 AND name = $5`, []any{t.TaskID, t.Name}
	case t.CorrelationKey != "":
		where, args = `tenant = $4 AND corr_key = $5`, []any{t.Tenant, t.CorrelationKey}
	default:
		where, args = `token_hash = $4`, []any{t.TokenHash}
	}
	var out ledger.Wait
	err := s.queryRow(ctx, `UPDATE ledger_waits SET state = $1, payload = COALESCE($2::bytea, payload), updated_at = $3
		WHERE `+where+` AND state = 'pending' RETURNING `+waitCols,
		func(r pgx.Row) (err error) { out, err = scanWait(r); return err },
		append([]any{string(to), payload, s.opts.Now()}, args...)...)
	if err == nil {
		return out, nil
	}
	if !isNoRows(err) {
		return ledger.Wait{}, classify(op, err, true)
	}
	sel := `SELECT state FROM ledger_waits WHERE ` + shift(where) + ` LIMIT 1`
	var state string
	err = s.pool.QueryRow(ctx, sel, args...).Scan(&state)
	if isNoRows(err) {
		return ledger.Wait{}, store.NotFound(op, "no such wait")
	}
	if err != nil {
		return ledger.Wait{}, classify(op, err, false)
	}
	return ledger.Wait{}, store.Conflictf(op, "the wait is %s", state)
}

// FindWait implements front.Backend.
func (s backend) FindWait(ctx context.Context, op string, t ledger.WaitTarget) (ledger.Wait, error) {
	var where string
	var args []any
	switch {
	case t.TaskID != "":
		where, args = `task_id = $1 AND name = $2`, []any{t.TaskID, t.Name}
	case t.CorrelationKey != "":
		where, args = `tenant = $1 AND corr_key = $2 ORDER BY state <> 'pending', updated_at DESC LIMIT 1`, []any{t.Tenant, t.CorrelationKey}
	default:
		where, args = `token_hash = $1`, []any{t.TokenHash}
	}
	w, err := scanWait(s.pool.QueryRow(ctx, `SELECT `+waitCols+` FROM ledger_waits WHERE `+where, args...))
	if isNoRows(err) {
		return ledger.Wait{}, store.NotFound(op, "no such wait")
	}
	return w, classify(op, err, false)
}

// shift renumbers $4, $5 to $1, $2.
func shift(where string) string {
	b := []byte(where)
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '$' && b[i+1] >= '4' && b[i+1] <= '9' {
			b[i+1] -= 3
		}
	}
	return string(b)
}
