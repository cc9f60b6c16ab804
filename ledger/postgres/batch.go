package postgres

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Array statements. A group (group.go) that holds several writes of one
// kind (Create, BeginRun, EndRun with a transition, PutStep, BeginEffect,
// SetEffect) completes them with one statement instead of one each: the
// writes' arguments go in as arrays, one per argument of the single
// statement ($k is the array of every write's k-th argument), unnested
// into one row per write with its ordinal (argRows), and every row the statement returns starts with the
// ordinal of its write, followed by the single statement's columns. A
// write that gets no row is refused exactly as its single statement would
// refuse it (its guard on the task's state or attempt did not hold, or
// its key was taken): the caller sees no rows and does what it does after
// a single statement. The writes share one statement's plan, locks and
// executor start (arrayPlanSQL keeps the plan on the indexes); what is
// left per write is its rows (docs/BENCHMARKS.md, "Array statements in
// the group writer").
//
// Two writes of one task (the same task ID, the write's first argument)
// never share an array statement: the second runs after it as its single
// statement, in the same transaction, so it sees the first's effect as
// it would in any serial order. The writes of one group are all in
// flight at once, so any order among them is one their callers may see.
// A server error in an array statement rolls back the group as any
// statement's does, and every write of it is then run alone (group.go).
//
// The arrays are []any, which pgx can encode only once it knows the
// parameter's type from the server: in the exec modes that do not
// describe the statement first (default_query_exec_mode=exec or
// simple_protocol) a group's writes are all single statements
// (noArrays), as they were before array statements.

// batchKind is one kind of write that groups complete with an array
// statement.
type batchKind struct {
	name string
	// single is the statement for one write.
	single string
	// array is the statement for several: $k is the array of the
	// writes' k-th arguments; each row returned starts with the write's
	// ordinal (1-based, bigint) and then has single's columns.
	array string
	// conv, when set, maps one write's arguments to the array
	// statement's elements (an argument that is itself an array).
	conv func(args []any) []any
	// ordinals: the array statement takes one more argument, the
	// writes' ordinals 1…n as a bigint array (argRows).
	ordinals bool
	// byID (with ordinals): the argument rows go in sorted by task ID
	// (the writes' first argument, bytewise), each with its write's
	// ordinal, so that a statement that updates the rows in the order of
	// its argument rows locks them in ID order (lean.go).
	byID bool
}

// arrays builds the array statement's arguments from its writes'.
func (k *batchKind) arrays(rs []*groupReq) []any {
	// order[i] is the index in rs of the i-th argument row.
	order := make([]int, len(rs))
	for i := range order {
		order[i] = i
	}
	if k.byID {
		if !k.ordinals {
			panic("postgres: array statement sorted by ID without ordinals: " + k.name)
		}
		id := func(i int) string { s, _ := rs[i].args[0].(string); return s }
		slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(id(a), id(b)) })
	}
	var cols [][]any
	for i, o := range order {
		args := rs[o].args
		if k.conv != nil {
			args = k.conv(args)
		}
		if cols == nil {
			cols = make([][]any, len(args))
			for j := range cols {
				cols[j] = make([]any, len(rs))
			}
		}
		for j, a := range args {
			cols[j][i] = a
		}
	}
	out := make([]any, len(cols), len(cols)+1)
	for j, c := range cols {
		out[j] = c
	}
	if k.ordinals {
		ords := make([]int64, len(rs))
		for i, o := range order {
			ords[i] = int64(o + 1)
		}
		out = append(out, ords)
	}
	return out
}

// argRows is the SELECT that opens an array statement whose kind has
// ordinals set: one row per write, its arguments as columns (cols are
// "name type" in $ order, $k the array of the writes' k-th argument)
// and its ordinal, ord, from the statement's last argument (the bigint
// array 1…n, batchKind.arrays). The arrays are unnested in the select
// list (a ProjectSet node, reading the arrays element by element in
// step, so the k-th row holds every array's k-th element) rather than as
// unnest(…) WITH ORDINALITY in FROM: a function in FROM is materialised
// into a tuplestore of its own per array, each starting with a 16 kB
// allocation, and for statements of 16 or 22 arrays (Create, EndRun)
// that churned the backend's heap on every execution (malloc, brk, page
// faults; docs/BENCHMARKS.md, "issue 15, fourteenth pass"). The ordinals
// come in as an array rather than from generate_series so that the
// planner estimates the rows as it did the function scan's (10, not
// generate_series's 1,000) and keeps the same join order.
func argRows(cols ...string) string {
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, c := range cols {
		name, typ, ok := strings.Cut(c, " ")
		if !ok {
			panic("postgres: argRows column without a type: " + c)
		}
		b.WriteString("unnest($" + strconv.Itoa(i+1) + "::" + typ + "[]) AS " + name + ", ")
	}
	b.WriteString("unnest($" + strconv.Itoa(len(cols)+1) + "::bigint[]) AS ord")
	return b.String()
}

// groupStmt is one statement of a group: a single write (kind nil) or
// an array statement completing reqs.
type groupStmt struct {
	kind *batchKind
	reqs []*groupReq
}

// planGroup orders a group's writes into statements: first every write
// that runs alone (a kind's only write, a write with no kind), in
// arrival order; then one array statement per kind with several writes,
// holding the first write of each row; then the other writes of those
// rows, alone, in arrival order. arrays is the index of the first array
// statement, -1 when there is none. With noArrays every write runs
// alone, in arrival order.
func planGroup(live []*groupReq, noArrays bool) (stmts []groupStmt, arrays int) {
	var (
		kinds  []groupStmt
		later  []*groupReq
		byKind map[*batchKind]int // index in kinds
		seen   map[*batchKind]map[string]bool
	)
	for _, r := range live {
		if r.kind == nil || noArrays {
			stmts = append(stmts, groupStmt{reqs: []*groupReq{r}})
			continue
		}
		if byKind == nil {
			byKind = map[*batchKind]int{}
			seen = map[*batchKind]map[string]bool{}
		}
		id, _ := r.args[0].(string)
		if seen[r.kind][id] {
			later = append(later, r)
			continue
		}
		if seen[r.kind] == nil {
			seen[r.kind] = map[string]bool{}
		}
		seen[r.kind][id] = true
		i, ok := byKind[r.kind]
		if !ok {
			i = len(kinds)
			byKind[r.kind] = i
			kinds = append(kinds, groupStmt{kind: r.kind})
		}
		kinds[i].reqs = append(kinds[i].reqs, r)
	}
	// A kind with one write runs its single statement: an array
	// statement saves nothing then.
	n := 0
	for _, k := range kinds {
		if len(k.reqs) == 1 {
			stmts = append(stmts, groupStmt{reqs: k.reqs})
		} else {
			kinds[n] = k
			n++
		}
	}
	arrays = -1
	if n > 0 {
		arrays = len(stmts)
	}
	stmts = append(stmts, kinds[:n]...)
	for _, r := range later {
		stmts = append(stmts, groupStmt{reqs: []*groupReq{r}})
	}
	return stmts, arrays
}

// arrayPlanSQL comes before a group's array statements: for the rest of
// the group's transaction (set_config's is_local), the planner joins the
// unnested writes to their rows by index (a nested loop over the
// primary keys, as each write's single statement does) and keeps one
// generic plan per statement and connection. Left to itself it costs a
// small or freshly grown ledger_tasks as cheaper to scan whole and hash
// (measured: a plan that flips between the two as the table grows, at
// up to five times the CPU per write), and re-plans the whole statement
// on every execution because each group's arrays differ in length. The
// single statements of the group that follow are index look-ups either
// way.
const arrayPlanSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
	set_config('enable_mergejoin', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

// readArray hands each row of an array statement to its write's scan and
// reports no rows to the writes that got none. An error reading the rows
// is returned (the caller makes it every write's).
func readArray(rows pgx.Rows, rs []*groupReq) error {
	defer rows.Close()
	got := make([]bool, len(rs))
	for rows.Next() {
		i, err := rowOrdinal(rows)
		if err != nil {
			rows.Close()
			return err
		}
		if i < 1 || i > int64(len(rs)) || got[i-1] {
			rows.Close()
			return fmt.Errorf("postgres: array statement returned write %d of %d", i, len(rs))
		}
		got[i-1] = true
		r := rs[i-1]
		if r.scan != nil {
			r.err = r.scan(ordRow{rows})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for i, r := range rs {
		if !got[i] && r.scan != nil {
			r.err = r.scan(noRow{})
		}
	}
	return nil
}

// rowOrdinal reads the current row's first column, a bigint.
func rowOrdinal(rows pgx.Rows) (int64, error) {
	raw := rows.RawValues()
	fd := rows.FieldDescriptions()
	if len(raw) == 0 || len(fd) == 0 || raw[0] == nil {
		return 0, fmt.Errorf("postgres: array statement returned a row without its ordinal")
	}
	if fd[0].Format == pgx.BinaryFormatCode {
		if len(raw[0]) != 8 {
			return 0, fmt.Errorf("postgres: array statement's ordinal has %d bytes", len(raw[0]))
		}
		return int64(binary.BigEndian.Uint64(raw[0])), nil
	}
	return strconv.ParseInt(string(raw[0]), 10, 64)
}

// ordRow is the current row of an array statement without its ordinal.
type ordRow struct{ rows pgx.Rows }

func (r ordRow) Scan(dest ...any) error {
	return r.rows.Scan(append([]any{nil}, dest...)...)
}

// noRow is a write's row when the array statement returned none for it.
type noRow struct{}

func (noRow) Scan(...any) error { return pgx.ErrNoRows }
