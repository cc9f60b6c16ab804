package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-dev/switchyard/broker"
)

// The lean BeginRun and EndRun array statements (lean.go) update their
// rows without locking them first in ID order (no ORDER BY … FOR
// UPDATE): the rows are updated, so locked, in the order of the argument
// rows, which batchKind.arrays sorts by task ID (byID). The tests here
// check both halves of that: the plan reads the argument rows as the
// outer side of a nested loop over the primary key (so the updates
// follow their order), and statements over overlapping sets of tasks in
// concurrent transactions never deadlock.

// leanArrayKinds are the array statements that rely on byID.
var leanArrayKinds = []*batchKind{beginRunLeanKind, endRunLeanKind}

func leanBeginArgs(id string, now time.Time) []any {
	return []any{id, 1, time.Minute.Microseconds(), now, "w1", now}
}

func leanEndArgs(id string, now time.Time) []any {
	return []any{id, "completed", now, 1, true, []byte("out"), nil, nil, []string{"running"}, "succeeded", "", "w1", 0,
		id, 1, "w1", nil, int64(time.Millisecond), "ok", "", "", ""}
}

// fillTasks creates n queued tasks (Create's array statement, 500 a
// statement) and returns their IDs.
func fillTasks(t *testing.T, s *Store, n int) []string {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	var ids []string
	for len(ids) < n {
		var rs []*groupReq
		for range min(500, n-len(ids)) {
			id := broker.NewID()
			ids = append(ids, id)
			rs = append(rs, &groupReq{args: []any{id, "", "", "k", "batch", "", []byte(`{"n":1}`), "queued", 0, 0, nil, nil, nil, nil, "", now}})
		}
		if _, err := s.pool.Exec(ctx, createKind.array, createKind.arrays(rs)...); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// runArray runs k's array statement over one write per args on tx (after
// arrayPlanSQL, as a group does) and returns how many rows it returned.
func runArray(ctx context.Context, tx pgx.Tx, k *batchKind, args [][]any) (int, error) {
	rs := make([]*groupReq, len(args))
	for i, a := range args {
		rs[i] = &groupReq{args: a}
	}
	if _, err := tx.Exec(ctx, arrayPlanSQL); err != nil {
		return 0, err
	}
	rows, err := tx.Query(ctx, k.array, k.arrays(rs)...)
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	return n, rows.Err()
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Cond     string     `json:"Index Cond"`
	Parent   string     `json:"Parent Relationship"`
	Plans    []planNode `json:"Plans"`
}

func (n *planNode) walk(f func(n, parent *planNode)) {
	var rec func(n, parent *planNode)
	rec = func(n, parent *planNode) {
		f(n, parent)
		for i := range n.Plans {
			rec(&n.Plans[i], n)
		}
	}
	rec(n, nil)
}

func (n *planNode) String() string {
	var b strings.Builder
	var rec func(n *planNode, depth int)
	rec = func(n *planNode, depth int) {
		fmt.Fprintf(&b, "%s%s %s %s %s (%s)\n", strings.Repeat("  ", depth), n.Type, n.Relation, n.Index, n.Cond, n.Parent)
		for i := range n.Plans {
			rec(&n.Plans[i], depth+1)
		}
	}
	rec(n, 0)
	return b.String()
}

// genericPlan is the generic plan of sql under arrayPlanSQL's settings:
// prepared, and explained with every parameter NULL (the values do not
// matter to a generic plan).
func genericPlan(t *testing.T, s *Store, sql string) *planNode {
	t.Helper()
	ctx := context.Background()
	nparams := 0
	for _, m := range regexp.MustCompile(`\$([0-9]+)`).FindAllStringSubmatch(sql, -1) {
		n, _ := strconv.Atoi(m[1])
		nparams = max(nparams, n)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, arrayPlanSQL); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `PREPARE lean_plan AS `+sql); err != nil {
		t.Fatal(err)
	}
	defer tx.Exec(ctx, `DEALLOCATE lean_plan`) // not undone by the rollback
	nulls := strings.TrimSuffix(strings.Repeat("NULL, ", nparams), ", ")
	var raw []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (COSTS OFF, FORMAT JSON) EXECUTE lean_plan(`+nulls+`)`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var out []struct{ Plan planNode }
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		t.Fatalf("EXPLAIN: %v: %s", err, raw)
	}
	return &out[0].Plan
}

// checkLeanPlan fails t unless plan updates ledger_tasks from a nested
// loop whose outer side is the argument rows alone and whose inner side
// is an index scan of ledger_tasks by its primary key, with no LockRows
// and no Sort anywhere.
func checkLeanPlan(t *testing.T, name string, plan *planNode) {
	t.Helper()
	if testing.Verbose() {
		t.Logf("%s:\n%s", name, plan)
	}
	var scans, modify int
	memoParent := map[*planNode]*planNode{}
	plan.walk(func(n, parent *planNode) {
		if n.Type == "Memoize" {
			memoParent[n] = parent
		}
		switch n.Type {
		case "LockRows", "Sort", "Incremental Sort", "Materialize", "Hash", "Merge Join", "Hash Join":
			t.Errorf("%s: plan has a %s node:\n%s", name, n.Type, plan)
		case "ModifyTable":
			modify++
		}
		if n.Relation != "ledger_tasks" || n.Type == "ModifyTable" {
			return
		}
		scans++
		// The nested loop's inner side: the index scan, or a Memoize
		// over it (a cache of the scan's rows by v.id, never hit: the
		// writes of an array statement are of distinct tasks).
		loop, inner := parent, n
		if loop != nil && loop.Type == "Memoize" {
			loop, inner = memoParent[loop], loop
		}
		if n.Type != "Index Scan" || n.Cond != "(id = v.id)" || inner.Parent != "Inner" ||
			loop == nil || loop.Type != "Nested Loop" {
			t.Errorf("%s: ledger_tasks read by %s %s on %s, want an index scan by id as a nested loop's inner side:\n%s",
				name, n.Type, n.Index, n.Cond, plan)
			return
		}
		for _, o := range loop.Plans {
			if o.Parent != "Outer" {
				continue
			}
			o.walk(func(m, _ *planNode) {
				if m.Relation == "ledger_tasks" {
					t.Errorf("%s: the nested loop's outer side reads ledger_tasks:\n%s", name, plan)
				}
			})
		}
	})
	if scans != 1 || modify != 1 {
		t.Errorf("%s: %d scans of ledger_tasks, %d ModifyTable; want 1 and 1:\n%s", name, scans, modify, plan)
	}
}

// TestLeanArrays_PlanShape: on an empty and on a populated (analysed)
// table, the generic plan of the lean array statements is a nested loop
// with the argument rows outer and the primary key's index scan inner —
// so the rows are updated, and locked, in the order of the argument rows
// — with no LockRows and no Sort.
func TestLeanArrays_PlanShape(t *testing.T) {
	t.Parallel()
	s := heldGroups(t)
	for _, k := range leanArrayKinds {
		if !k.byID || !k.ordinals {
			t.Errorf("%s: byID %v, ordinals %v; want both", k.name, k.byID, k.ordinals)
		}
		checkLeanPlan(t, k.name+", empty table", genericPlan(t, s, k.array))
	}
	ids := fillTasks(t, s, 3000)
	ctx := context.Background()
	now := time.Now()
	// Some rows in every state the statements read: running, and
	// completed with their attempt rows.
	for _, k := range leanArrayKinds {
		var args [][]any
		for _, id := range ids[:1000] {
			if k == beginRunLeanKind {
				args = append(args, leanBeginArgs(id, now))
			} else {
				args = append(args, leanEndArgs(id, now))
			}
		}
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := runArray(ctx, tx, k, args); err != nil || n != len(args) {
			t.Fatalf("%s: %d rows of %d: %v", k.name, n, len(args), err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE ledger_tasks; ANALYZE ledger_attempts`); err != nil {
		t.Fatal(err)
	}
	for _, k := range leanArrayKinds {
		checkLeanPlan(t, k.name+", populated table", genericPlan(t, s, k.array))
	}
}

// TestArrays_ByID: a byID kind's argument rows go in sorted by task ID,
// each with its write's ordinal; other kinds keep the writes' order.
func TestArrays_ByID(t *testing.T) {
	ids := []string{"c", "a", "d", "b"}
	var rs []*groupReq
	for _, id := range ids {
		rs = append(rs, &groupReq{args: []any{id, 1}})
	}
	k := &batchKind{ordinals: true, byID: true}
	got := k.arrays(rs)
	if want := []any{"a", "b", "c", "d"}; !slices.Equal(got[0].([]any), want) {
		t.Errorf("byID IDs %v, want %v", got[0], want)
	}
	if want := []int64{2, 4, 1, 3}; !slices.Equal(got[2].([]int64), want) {
		t.Errorf("byID ordinals %v, want %v", got[2], want)
	}
	k.byID = false
	got = k.arrays(rs)
	if want := []any{"c", "a", "d", "b"}; !slices.Equal(got[0].([]any), want) {
		t.Errorf("IDs %v, want %v", got[0], want)
	}
	if want := []int64{1, 2, 3, 4}; !slices.Equal(got[2].([]int64), want) {
		t.Errorf("ordinals %v, want %v", got[2], want)
	}
}

// TestLeanArrays_NoDeadlock: connections run a lean array statement over
// overlapping, shuffled sets of the same tasks in concurrent transactions
// (each rolled back after a round trip, so every write of the next finds
// its row as before), and none is chosen as a deadlock victim; every
// statement returns a row for every write. With
// SWITCHYARD_LOCKORDER_CONTROL=1 it runs the same with the argument rows
// in the writes' shuffled order (byID off) and fails unless that
// deadlocks: the check that the sort is what keeps them apart (each
// deadlock costs the server's deadlock_timeout).
func TestLeanArrays_NoDeadlock(t *testing.T) {
	t.Parallel()
	control := os.Getenv("SWITCHYARD_LOCKORDER_CONTROL") == "1"
	for _, k := range leanArrayKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := heldGroups(t)
			ids := fillTasks(t, s, 40)
			now := time.Now()
			args := func(id string) []any { return leanBeginArgs(id, now) }
			if k == endRunLeanKind {
				args = func(id string) []any { return leanEndArgs(id, now) }
				var begin [][]any
				for _, id := range ids {
					begin = append(begin, leanBeginArgs(id, now))
				}
				tx, err := s.pool.Begin(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if n, err := runArray(context.Background(), tx, beginRunLeanKind, begin); err != nil || n != len(ids) {
					t.Fatalf("%d rows of %d: %v", n, len(ids), err)
				}
				if err := tx.Commit(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			sorted := k
			if control {
				kk := *k
				kk.byID = false
				k = &kk
			}
			deadlocks, stmts := lockRace(t, s, k, ids, args, control)
			t.Logf("%s (byID %v): %d statements, %d deadlocks", k.name, k.byID, stmts, deadlocks)
			if control && deadlocks == 0 {
				t.Errorf("%s with byID off: no deadlock in %d statements", sorted.name, stmts)
			}
			if !control && deadlocks > 0 {
				t.Errorf("%s: %d deadlocks in %d statements", k.name, deadlocks, stmts)
			}
		})
	}
}

// lockRace runs k on 4 connections, 150 transactions each (stopping at
// the first deadlock when stopAtDeadlock), every transaction k's array
// statement over 24 of ids in a random order; it returns the deadlocks
// (SQLSTATE 40P01) and the statements run, and fails t on any other
// error or a statement that missed a row.
func lockRace(t *testing.T, s *Store, k *batchKind, ids []string, args func(string) []any, stopAtDeadlock bool) (deadlocks, stmts int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const conns, iters, per = 4, 150, 24
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		stop = make(chan struct{})
		once sync.Once
	)
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close(context.Background())
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for range iters {
				select {
				case <-stop:
					return
				default:
				}
				set := slices.Clone(ids)
				rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
				var a [][]any
				for _, id := range set[:per] {
					a = append(a, args(id))
				}
				tx, err := c.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				n, err := runArray(ctx, tx, k, a)
				tx.Rollback(ctx)
				mu.Lock()
				stmts++
				var pe *pgconn.PgError
				switch {
				case errors.As(err, &pe) && pe.Code == "40P01":
					deadlocks++
					if stopAtDeadlock {
						once.Do(func() { close(stop) })
					}
				case err != nil:
					t.Error(err)
				case n != per:
					t.Errorf("%d rows of %d", n, per)
				}
				mu.Unlock()
				if err != nil && (pe == nil || pe.Code != "40P01") {
					return
				}
			}
		}()
	}
	wg.Wait()
	return deadlocks, stmts
}

// TestLeanArrays_ConcurrentUpdate: a lean array statement that waits for
// a transaction that updates some of its rows re-checks them on their
// new versions once it commits (READ COMMITTED's EvalPlanQual): a row
// moved out of the guards (cancelled) is skipped, a row changed within
// them is updated from its new version (the attempt and event_seq that
// transaction left); the others are updated as usual. The statement is
// run in the form kept (lean.go) and in the form it replaced (locked
// first in a CTE, beginRunLeanCTE and endRunLeanCTE), and both leave the
// same rows and return the same ones.
func TestLeanArrays_ConcurrentUpdate(t *testing.T) {
	t.Parallel()
	forms := []struct {
		name       string
		begin, end string
	}{{"update", beginRunLeanKind.array, endRunLeanKind.array}, {"cte", beginRunLeanCTE, endRunLeanCTE}}
	var results [2]string
	for fi, f := range forms {
		s := heldGroups(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ids := fillTasks(t, s, 4)
		slices.Sort(ids)
		now := time.Now()
		var log []string
		for _, step := range []struct {
			k   *batchKind
			sql string
			// touch is the other transaction's change to ids[1] (kept
			// within the guards) and ids[2] (moved out of them).
			touch [2]string
		}{
			{beginRunLeanKind, f.begin, [2]string{`UPDATE ledger_tasks SET attempt = 2, event_seq = event_seq + 1 WHERE id = $1`,
				`UPDATE ledger_tasks SET state = 'cancelled', event_seq = event_seq + 1 WHERE id = $1`}},
			{endRunLeanKind, f.end, [2]string{`UPDATE ledger_tasks SET event_seq = event_seq + 1, lease_until = NULL WHERE id = $1`,
				`UPDATE ledger_tasks SET state = 'cancelled', event_seq = event_seq + 1 WHERE id = $1`}},
		} {
			other, err := s.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Rollback(context.Background()) // before the schema's cleanup
			for i, sql := range step.touch {
				if tag, err := other.Exec(ctx, sql, ids[i+1]); err != nil || tag.RowsAffected() != 1 {
					t.Fatal(tag, err)
				}
			}
			var pid int32
			if err := other.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			type result struct {
				ords []int64
				err  error
			}
			done := make(chan result, 1)
			go func() {
				tx, err := s.pool.Begin(ctx)
				if err != nil {
					done <- result{err: err}
					return
				}
				defer tx.Rollback(ctx)
				var rs []*groupReq
				for _, id := range []string{ids[3], ids[1], ids[0], ids[2]} {
					a := leanBeginArgs(id, now)
					if step.k == endRunLeanKind {
						a = leanEndArgs(id, now)
						a[3] = 0 // keep the attempt the row has
						if id == ids[1] {
							a[14] = 2 // the attempt it began (step 1)
						}
					}
					rs = append(rs, &groupReq{args: a})
				}
				if _, err := tx.Exec(ctx, arrayPlanSQL); err != nil {
					done <- result{err: err}
					return
				}
				rows, err := tx.Query(ctx, step.sql, step.k.arrays(rs)...)
				if err != nil {
					done <- result{err: err}
					return
				}
				var ords []int64
				for rows.Next() {
					o, err := rowOrdinal(rows)
					if err != nil {
						done <- result{err: err}
						return
					}
					ords = append(ords, o)
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					done <- result{err: err}
					return
				}
				done <- result{ords: ords, err: tx.Commit(ctx)}
			}()
			// Wait until the statement waits for other's lock.
			for waited := false; !waited; {
				select {
				case r := <-done:
					t.Fatalf("%s: the statement did not wait: %v %v", f.name, r.ords, r.err)
				case <-time.After(5 * time.Millisecond):
				}
				if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))`, pid).Scan(&waited); err != nil {
					t.Fatal(err)
				}
			}
			if err := other.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			slices.Sort(r.ords)
			// Ordinals: 1 ids[3], 2 ids[1], 3 ids[0]; ids[2] (4) was
			// moved out of the guards.
			if want := []int64{1, 2, 3}; !slices.Equal(r.ords, want) {
				t.Errorf("%s, %s: rows for writes %v, want %v", f.name, step.k.name, r.ords, want)
			}
			log = append(log, fmt.Sprintf("%s rows %v", step.k.name, r.ords))
			if step.k == beginRunLeanKind {
				// ids[2] was cancelled before it began: queue it again
				// and begin it, so that every task is running for the
				// next step.
				if _, err := s.pool.Exec(ctx, `UPDATE ledger_tasks SET state = 'queued' WHERE id = $1`, ids[2]); err != nil {
					t.Fatal(err)
				}
				tx, err := s.pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if n, err := runArray(ctx, tx, beginRunLeanKind, [][]any{leanBeginArgs(ids[2], now), leanBeginArgs(ids[3], now)}); err != nil || n != 1 {
					t.Fatalf("%d rows: %v", n, err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i, id := range ids {
			var row string
			if err := s.pool.QueryRow(ctx, `SELECT concat_ws(' ', state, attempt, event_seq, run_attempt, run_ev_seq, end_ev_seq, end_ev_from, end_ev_to)
				FROM ledger_tasks WHERE id = $1`, id).Scan(&row); err != nil {
				t.Fatal(err)
			}
			log = append(log, fmt.Sprintf("task %d: %s", i, row))
		}
		results[fi] = strings.Join(log, "\n")
		t.Logf("%s:\n%s", f.name, results[fi])
	}
	if results[0] != results[1] {
		t.Errorf("the forms differ:\nupdate:\n%s\ncte:\n%s", results[0], results[1])
	}
	// The changes within the guards were read: task 1 began attempt 2
	// (the attempt the other transaction set) and its events count both
	// transactions' updates.
	if want := "task 1: completed 2 5 2 3 5 running completed"; !strings.Contains(results[0], want) {
		t.Errorf("want %q in:\n%s", want, results[0])
	}
}
