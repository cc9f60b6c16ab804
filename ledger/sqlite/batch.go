package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// Grouped statements. A group (writer.go) that holds several writes of
// one kind (Create, BeginRun, EndRun with a transition) completes them
// with a few multi-row statements instead of a few statements and a
// savepoint each: one SELECT of every task the writes touch (id IN
// (…)), the decisions made in Go exactly as each write alone makes them
// (store.NextRun, the transition's from-states and attempt guard), then
// one multi-row INSERT or UPDATE … FROM (VALUES …) per table. On the
// single writer connection nothing else moves a row between the read and
// the write, and every UPDATE is still guarded by the state and the
// event sequence it read: a row count that differs from the decisions is
// an error.
//
// The per-write semantics are those of the write alone (as in the
// PostgreSQL store's array statements, ledger/postgres/batch.go):
//
//   - a write refused by its own guard (a conflict, an unknown task) gets
//     its own outcome and changes nothing; the other writes of the
//     statement go on;
//   - two writes touching the same task (or, for Create, the same
//     idempotency key) never share a statement: the later runs alone,
//     after it, in the same transaction, and sees its effect;
//   - an error of a grouped statement itself (not a write's refusal)
//     rolls back to the savepoint before it, and each of its writes then
//     runs alone in its own savepoint, getting its own outcome.
//
// The writes of one group are all in flight at once, so any order among
// them is one their callers may see.
//
// Statements hold at most maxRows rows; a longer list is cut into
// power-of-two pieces so that each statement text (and its prepared
// statement) is one of a few.

// maxRows bounds the rows of one multi-row statement.
const maxRows = 128

// batchItem is one write's arguments and results in a grouped statement.
type batchItem interface {
	// keys identify what the write touches: two writes sharing a key
	// never share a grouped statement.
	keys() []string
}

// batchKind is one kind of write a group completes with grouped
// statements.
type batchKind struct {
	name string
	// run completes rs (all of this kind, no two sharing a key) in tx:
	// it sets each write's results in its item, and a write's own
	// refusal in its err. An error means the statements failed: the
	// caller rolls them back and runs each write alone.
	run func(ctx context.Context, s *Store, tx *sql.Tx, rs []*writeReq) error
}

// callBatch runs k.run, turning a panic into an error (the writes then
// run alone, where a panic is their own error).
func callBatch(ctx context.Context, s *Store, tx *sql.Tx, k *batchKind, rs []*writeReq) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in a grouped ledger write (%s): %v", k.name, p)
		}
	}()
	return k.run(ctx, s, tx, rs)
}

// groupStmt is one step of a group: a write alone (kind nil) or a
// grouped statement completing reqs.
type groupStmt struct {
	kind *batchKind
	reqs []*writeReq
}

// planGroup orders a group's writes: first every write that runs alone
// (one with no kind, or its kind's only write), in arrival order; then
// one grouped step per kind with several writes; then, alone and in
// arrival order, the writes that share a key with an earlier write of
// their kind.
func planGroup(live []*writeReq) []groupStmt {
	var (
		stmts, kinds []groupStmt
		later        []*writeReq
		byKind       map[*batchKind]int
		seen         map[*batchKind]map[string]bool
	)
	for _, r := range live {
		if r.kind == nil {
			stmts = append(stmts, groupStmt{reqs: []*writeReq{r}})
			continue
		}
		if byKind == nil {
			byKind = map[*batchKind]int{}
			seen = map[*batchKind]map[string]bool{}
		}
		if seen[r.kind] == nil {
			seen[r.kind] = map[string]bool{}
		}
		ks := r.item.keys()
		dup := false
		for _, k := range ks {
			dup = dup || seen[r.kind][k]
		}
		if dup {
			later = append(later, r)
			continue
		}
		for _, k := range ks {
			seen[r.kind][k] = true
		}
		i, ok := byKind[r.kind]
		if !ok {
			i = len(kinds)
			byKind[r.kind] = i
			kinds = append(kinds, groupStmt{kind: r.kind})
		}
		kinds[i].reqs = append(kinds[i].reqs, r)
	}
	for _, k := range kinds {
		if len(k.reqs) == 1 {
			stmts = append(stmts, groupStmt{reqs: k.reqs})
		}
	}
	for _, k := range kinds {
		if len(k.reqs) > 1 {
			stmts = append(stmts, k)
		}
	}
	for _, r := range later {
		stmts = append(stmts, groupStmt{reqs: []*writeReq{r}})
	}
	return stmts
}

// multiSQL is a statement with a list of rows: prefix, n copies of row
// joined by commas, suffix; built once per power-of-two n.
type multiSQL struct {
	prefix, row, suffix string
	once                [8]sync.Once // n = 1, 2, 4, …, 128
	q                   [8]string
	width               int // placeholders per row
}

func newMulti(prefix, row, suffix string) *multiSQL {
	return &multiSQL{prefix: prefix, row: row, suffix: suffix, width: strings.Count(row, "?")}
}

// sql returns the statement for n rows, n a power of two ≤ maxRows.
func (m *multiSQL) sql(n int) string {
	i := bits.TrailingZeros(uint(n))
	m.once[i].Do(func() {
		var b strings.Builder
		b.WriteString(m.prefix)
		for j := range n {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(m.row)
		}
		b.WriteString(m.suffix)
		m.q[i] = b.String()
	})
	return m.q[i]
}

// piece is the rows of the next statement for k rows left: the largest
// power of two ≤ min(k, maxRows).
func piece(k int) int {
	return 1 << (bits.Len(uint(min(k, maxRows))) - 1)
}

// execRows runs m over args (m.width arguments a row), in pieces, and
// returns the rows changed.
func (s *Store) execRows(ctx context.Context, tx *sql.Tx, m *multiSQL, args []any) (int64, error) {
	var total int64
	for len(args) > 0 {
		n := piece(len(args) / m.width)
		res, err := s.txExec(ctx, tx, m.sql(n), args[:n*m.width]...)
		if err != nil {
			return total, err
		}
		c, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += c
		args = args[n*m.width:]
	}
	return total, nil
}

// The grouped reads of the tasks a group's writes touch: the task, its
// event sequence, the run it holds and whether its row holds an event of
// the write's kind (migration 0015), which the write turns into a row
// before replacing it: BeginRun the start event (run_ev_*), EndRun the
// end event (end_ev_*).
var (
	beginByIDSQL = newMulti(`SELECT `+taskCols+`, event_seq, run_attempt, run_worker, run_start, run_ev_seq FROM ledger_tasks WHERE id IN (`, `?`, `)`)
	endByIDSQL   = newMulti(`SELECT `+taskCols+`, event_seq, run_attempt, run_worker, run_start, end_ev_seq FROM ledger_tasks WHERE id IN (`, `?`, `)`)
)

// current is a task as a grouped write read it, with its event sequence,
// the run it holds and the sequence number of the event its row holds
// for the write's kind (NULL when none).
type current struct {
	t    *ledger.Task
	seq  int64
	run  prevRun
	held sql.NullInt64
}

// tasksByID reads, with m (beginByIDSQL or endByIDSQL), the tasks of ids
// (distinct) that exist.
func (s *Store) tasksByID(ctx context.Context, tx *sql.Tx, m *multiSQL, ids []any) (map[string]current, error) {
	out := make(map[string]current, len(ids))
	for len(ids) > 0 {
		n := piece(len(ids))
		rows, err := s.txQuery(ctx, tx, m.sql(n), ids[:n]...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var c current
			c.t, err = scanTaskExtra(rows, &c.seq, &c.run.attempt, &c.run.worker, &c.run.start, &c.held)
			if err != nil {
				rows.Close()
				return nil, err
			}
			out[c.t.ID] = c
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return out, nil
}

// eventsSQL appends events (one row each, their sequence numbers given).
var eventsSQL = newMulti(`INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor) VALUES `,
	`(?, ?, ?, ?, ?, ?, ?, ?)`, ``)

// errRowCount is a grouped UPDATE that changed another number of rows
// than the writes it decided (never expected on the single writer).
func errRowCount(what string, got int64, want int) error {
	return fmt.Errorf("sqlite: grouped %s changed %d rows, not %d", what, got, want)
}

// BeginRun's grouped statements.
var (
	beginRunKind = &batchKind{name: "begin run", run: runBeginBatch}
	// beginUpdateSQL moves the tasks and keeps each start event in the
	// task row (run_ev_*; its actor is run_worker).
	beginUpdateSQL = newMulti(`WITH v(v_id, v_old, v_seq, v_n, v_lease, v_at, v_worker, v_start, v_reason, v_detail) AS (VALUES `,
		`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		`) UPDATE ledger_tasks SET state = 'running', attempt = v_n, lease_until = v_lease, updated_at = v_at, event_seq = event_seq + 1,
			run_attempt = v_n, run_worker = v_worker, run_start = v_start,
			run_ev_seq = event_seq + 1, run_ev_at = v_at, run_ev_from = v_old, run_ev_reason = v_reason, run_ev_detail = v_detail
		FROM v WHERE id = v_id AND state = v_old AND event_seq = v_seq`)
	// beginAttemptSQL gives an attempt number that already has a row (a
	// snooze or a return spends none) the new run's worker and start.
	beginAttemptSQL = newMulti(`WITH v(v_id, v_n, v_worker, v_start) AS (VALUES `, `(?, ?, ?, ?)`,
		`) UPDATE ledger_attempts SET worker = v_worker, start_at = v_start FROM v WHERE task_id = v_id AND number = v_n`)
	// heldStartSQL writes the start events the task rows hold as rows
	// (their actor is the run's worker), before BeginRun replaces them; a
	// 'running' event writes no note.
	heldStartSQL = newMulti(`INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
		SELECT id, run_ev_seq, run_ev_at, run_ev_from, 'running', run_ev_reason, run_ev_detail, COALESCE(run_worker, '')
		FROM ledger_tasks WHERE run_ev_seq IS NOT NULL AND id IN (`, `?`, `)`)
	// prevAttemptSQL writes the row of a held run that never got one,
	// before the task row forgets it.
	prevAttemptSQL = newMulti(`INSERT INTO ledger_attempts (task_id, number, worker, start_at) VALUES `, `(?, ?, ?, ?)`,
		` ON CONFLICT (task_id, number) DO NOTHING`)
)

// beginItem is one BeginRun.
type beginItem struct {
	op       string
	req      ledger.RunStart
	out      *ledger.Task
	conflict error
}

func (it *beginItem) keys() []string { return []string{it.req.ID} }

func runBeginBatch(ctx context.Context, s *Store, tx *sql.Tx, rs []*writeReq) error {
	ids := make([]any, len(rs))
	for i, r := range rs {
		ids[i] = r.item.(*beginItem).req.ID
	}
	cur, err := s.tasksByID(ctx, tx, beginByIDSQL, ids)
	if err != nil {
		return err
	}
	now := s.opts.Now()
	at := now.UnixNano()
	var upd, held, att, prev []any
	for _, r := range rs {
		it := r.item.(*beginItem)
		it.out, it.conflict = nil, nil
		c, ok := cur[it.req.ID]
		if !ok {
			r.err = store.NotFound(it.op, "task %s", it.req.ID)
			continue
		}
		n, reason, detail, ok := store.NextRun(c.t, it.req.Attempt, now)
		if !ok {
			it.out, it.conflict = c.t, store.RunConflict(it.op, c.t)
			continue
		}
		start := it.req.Start
		if start.IsZero() {
			start = now
		}
		lease := now.Add(it.req.Lease).UnixNano()
		upd = append(upd, it.req.ID, string(c.t.State), c.seq, n, lease, at, it.req.Worker, start.UnixNano(), reason, detail)
		if c.held.Valid {
			// The start event the row holds becomes a row.
			held = append(held, it.req.ID)
		}
		att = append(att, it.req.ID, n, it.req.Worker, start.UnixNano())
		if c.run.flush(n) {
			prev = append(prev, it.req.ID, c.run.attempt.Int64, c.run.worker.String, c.run.start)
		}
		t := *c.t
		t.State, t.Attempt, t.LeaseUntil, t.UpdatedAt = ledger.Running, n, time.Unix(0, lease), time.Unix(0, at)
		it.out = &t
	}
	want := len(att) / beginAttemptSQL.width
	if want == 0 {
		return nil
	}
	if _, err := s.execRows(ctx, tx, heldStartSQL, held); err != nil {
		return err
	}
	if got, err := s.execRows(ctx, tx, beginUpdateSQL, upd); err != nil {
		return err
	} else if got != int64(want) {
		return errRowCount("begin run", got, want)
	}
	if _, err := s.execRows(ctx, tx, prevAttemptSQL, prev); err != nil {
		return err
	}
	_, err = s.execRows(ctx, tx, beginAttemptSQL, att)
	return err
}

// EndRun's grouped statements (a transition's; an EndRun without one
// runs alone).
var (
	endRunKind    = &batchKind{name: "end run", run: runEndBatch}
	endAttemptSQL = newMulti(finishAttemptHead, `(?, ?, ?, ?, ?, ?, ?, ?, ?)`, finishAttemptTail)
	// endUpdateSQL moves the tasks and keeps each move's event in the
	// task row (end_ev_*).
	endUpdateSQL = newMulti(`WITH v(v_id, v_old, v_seq, v_to, v_at, v_att, v_setres, v_result, v_lasterr, v_runat, v_lane,
			v_reason, v_detail, v_actor) AS (VALUES `,
		`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		`) UPDATE ledger_tasks SET state = v_to, updated_at = v_at, event_seq = event_seq + 1,
			end_ev_seq = event_seq + 1, end_ev_at = v_at, end_ev_from = v_old, end_ev_to = v_to,
			end_ev_reason = v_reason, end_ev_detail = v_detail, end_ev_actor = v_actor,
			attempt = CASE WHEN v_att > 0 THEN v_att ELSE attempt END,
			result = CASE WHEN v_setres THEN v_result ELSE result END,
			last_error = COALESCE(v_lasterr, last_error),
			run_at = COALESCE(v_runat, run_at),
			lane = COALESCE(v_lane, lane),
			lease_until = CASE WHEN v_to = 'running' THEN lease_until ELSE NULL END
		FROM v WHERE id = v_id AND state = v_old AND event_seq = v_seq`)
	// stateNotesSQL writes the state notes of the events kept in the task
	// rows, as the trigger ledger_events_note writes an event row's.
	stateNotesSQL = newMulti(`INSERT INTO ledger_notes (at, topic, task_id, state) VALUES `, `(?, 'state', ?, ?)`, ``)
)

// heldEndSQL reads the end events the task rows hold.
var heldEndSQL = newMulti(`SELECT id, end_ev_seq, end_ev_at, end_ev_from, end_ev_to, end_ev_reason, end_ev_detail, end_ev_actor
	FROM ledger_tasks WHERE end_ev_seq IS NOT NULL AND id IN (`, `?`, `)`)

// heldEnds reads the end events the rows of ids hold, as rows of
// eventsSQL. EndRun writes them after its move: an event row that is not
// its task's latest event writes no note (the trigger's condition,
// migration 0015), and its note was written when it happened.
func (s *Store) heldEnds(ctx context.Context, tx *sql.Tx, ids []any) ([]any, error) {
	var ev []any
	for len(ids) > 0 {
		n := piece(len(ids))
		rows, err := s.txQuery(ctx, tx, heldEndSQL.sql(n), ids[:n]...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var (
				id, from, to, reason, detail, actor string
				seq, at                             int64
			)
			if err := rows.Scan(&id, &seq, &at, &from, &to, &reason, &detail, &actor); err != nil {
				rows.Close()
				return nil, err
			}
			ev = append(ev, id, seq, at, from, to, reason, detail, actor)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return ev, nil
}

// notifies says whether a move from → to writes a state note (the
// trigger ledger_events_note's condition, migrations 0006 and 0015).
func notifies(from, to ledger.State) bool {
	switch to {
	case ledger.Completed, ledger.Failed, ledger.Dead, ledger.Rejected, ledger.Cancelled, ledger.AwaitingReview:
		return to != from
	}
	return false
}

// endItem is one EndRun with a transition.
type endItem struct {
	op       string
	req      ledger.RunEnd
	from     []ledger.State
	out      *ledger.Task
	conflict error
}

func (it *endItem) keys() []string { return []string{it.req.Attempt.TaskID} }

func runEndBatch(ctx context.Context, s *Store, tx *sql.Tx, rs []*writeReq) error {
	ids := make([]any, len(rs))
	for i, r := range rs {
		ids[i] = r.item.(*endItem).req.Attempt.TaskID
	}
	cur, err := s.tasksByID(ctx, tx, endByIDSQL, ids)
	if err != nil {
		return err
	}
	at := s.opts.Now().UnixNano()
	var atts, upd, held, notes []any
	moved := 0
	for _, r := range rs {
		it := r.item.(*endItem)
		it.out, it.conflict = nil, nil
		a, tr := it.req.Attempt, it.req.Transition
		c, ok := cur[a.TaskID]
		if !ok {
			r.err = store.NotFound(it.op, "task %s", a.TaskID)
			continue
		}
		// An empty worker and a zero start are the held run's, as
		// finishAttemptSQL takes them alone.
		worker, start := a.Worker, nanos(a.Start)
		if w, st := c.run.of(a.Number); worker == "" || start == nil {
			if worker == "" {
				worker = w
			}
			if start == nil {
				start = st
			}
		}
		atts = append(atts, a.TaskID, a.Number, worker, start, int64(a.Duration), a.Outcome, a.Class, a.Error, a.Stack)
		if !slices.Contains(it.from, c.t.State) || !store.AttemptGuard(tr, c.t.Attempt) {
			// The attempt is recorded; the move is refused.
			it.out, it.conflict = c.t, store.Conflict(it.op, tr.ID, c.t.State, tr.To)
			continue
		}
		t := *c.t
		t.State, t.UpdatedAt = tr.To, time.Unix(0, at)
		if tr.Attempt > 0 {
			t.Attempt = tr.Attempt
		}
		var result, lastErr, runAt, lane any
		if tr.Result != nil {
			result, t.Result = tr.Result, slices.Clone(tr.Result)
		}
		if tr.LastError != nil {
			lastErr, t.LastError = *tr.LastError, *tr.LastError
		}
		if !tr.RunAt.IsZero() {
			runAt, t.RunAt = tr.RunAt.UnixNano(), time.Unix(0, tr.RunAt.UnixNano())
		}
		if tr.Lane != "" {
			lane, t.Lane = tr.Lane, tr.Lane
		}
		if tr.To != ledger.Running {
			t.LeaseUntil = time.Time{}
		}
		upd = append(upd, tr.ID, string(c.t.State), c.seq, string(tr.To), at, tr.Attempt, tr.Result != nil, result, lastErr, runAt, lane,
			tr.Reason, tr.Detail, tr.Actor)
		moved++
		if c.held.Valid {
			// The end event the row holds becomes a row.
			held = append(held, tr.ID)
		}
		if notifies(c.t.State, tr.To) {
			notes = append(notes, at, tr.ID, string(tr.To))
		}
		it.out = &t
	}
	if len(atts) == 0 {
		return nil
	}
	if _, err := s.execRows(ctx, tx, endAttemptSQL, atts); err != nil {
		return err
	}
	if moved == 0 {
		return nil
	}
	ev, err := s.heldEnds(ctx, tx, held)
	if err != nil {
		return err
	}
	if got, err := s.execRows(ctx, tx, endUpdateSQL, upd); err != nil {
		return err
	} else if got != int64(moved) {
		return errRowCount("end run", got, moved)
	}
	if _, err := s.execRows(ctx, tx, eventsSQL, ev); err != nil {
		return err
	}
	_, err = s.execRows(ctx, tx, stateNotesSQL, notes)
	return err
}

// Create's grouped statement: the tasks in one INSERT, those it did not
// insert (their ID or idempotency key taken) then found as Create finds
// them.
var (
	createKind = &batchKind{name: "create", run: runCreateBatch}
	createSQL  = newMulti(`INSERT INTO ledger_tasks (`+taskCols+`, event_seq) VALUES `,
		`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 1)`, ` ON CONFLICT DO NOTHING RETURNING id`)
)

// createItem is one task to create (validated, its metadata encoded);
// existing is the task that already held its ID or key.
type createItem struct {
	t        *ledger.Task
	meta     any
	existing *ledger.Task
}

func (it *createItem) keys() []string {
	ks := []string{"i\x00" + it.t.ID}
	if it.t.IdempotencyKey != "" {
		ks = append(ks, "k\x00"+it.t.Tenant+"\x00"+it.t.IdempotencyKey)
	}
	return ks
}

func runCreateBatch(ctx context.Context, s *Store, tx *sql.Tx, rs []*writeReq) error {
	items := make([]*createItem, len(rs))
	for i, r := range rs {
		items[i] = r.item.(*createItem)
	}
	return s.createRows(ctx, tx, items)
}

// createRows records items (no two sharing an ID or a key) as createIn
// records each, in multi-row INSERTs.
func (s *Store) createRows(ctx context.Context, tx *sql.Tx, items []*createItem) error {
	w := createSQL.width
	args := make([]any, 0, len(items)*w)
	for _, it := range items {
		it.existing = nil
		t := it.t
		now := t.CreatedAt.UnixNano()
		args = append(args, t.ID, t.Tenant, t.IdempotencyKey, t.Kind, t.Lane, t.OrderingKey, t.Args, string(t.State), t.Attempt, t.MaxAttempts,
			nanos(t.RunAt), nanos(t.Deadline), it.meta, t.Result, t.LastError, now, now)
	}
	inserted := make(map[string]bool, len(items))
	for len(args) > 0 {
		n := piece(len(args) / w)
		rows, err := s.txQuery(ctx, tx, createSQL.sql(n), args[:n*w]...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			inserted[id] = true
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		args = args[n*w:]
	}
	e := execWriter{s, tx}
	for _, it := range items {
		if inserted[it.t.ID] {
			continue
		}
		// Not inserted: its key's holder, as createIn looks it up first,
		// or else the task that holds its ID.
		if it.t.IdempotencyKey != "" {
			ex, err := scanTask(e.queryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE tenant = ? AND idem_key = ? AND idem_key <> ''`, it.t.Tenant, it.t.IdempotencyKey))
			if err == nil {
				it.existing = ex
				continue
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		ex, err := scanTask(e.queryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE id = ?`, it.t.ID))
		if err != nil {
			return err
		}
		it.existing = ex
	}
	return nil
}

// createMany records items in order, as createIn would one after the
// other: those sharing an ID or a key with an earlier one are recorded
// alone after the others, in order, so each finds the earlier.
func (s *Store) createMany(ctx context.Context, tx *sql.Tx, items []*createItem) error {
	seen := make(map[string]bool, len(items))
	first := make([]*createItem, 0, len(items))
	var later []*createItem
	for _, it := range items {
		ks := it.keys()
		dup := false
		for _, k := range ks {
			dup = dup || seen[k]
		}
		if dup {
			later = append(later, it)
			continue
		}
		for _, k := range ks {
			seen[k] = true
		}
		first = append(first, it)
	}
	if err := s.createRows(ctx, tx, first); err != nil {
		return err
	}
	for _, it := range later {
		ex, err := s.createInTx(ctx, tx, it.t, it.meta)
		if err != nil {
			return err
		}
		it.existing = ex
	}
	return nil
}
