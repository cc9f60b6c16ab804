package runtimebench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// PruneConfig describes a pruning measurement (issue 15, "ledger growth
// at scale").
type PruneConfig struct {
	// LedgerDSN is the ledger (postgres://… or sqlite:///path); a fresh
	// schema or file is derived from it and removed after.
	LedgerDSN string
	// Rows is how many completed tasks to fill the ledger with. Defaults
	// to 1,000,000.
	Rows int
	// Workers run the hot path at once. Defaults to 8.
	Workers int
	// Window is how long the baseline hot path runs. Defaults to 10s.
	Window time.Duration
	// Timeout bounds the whole run. Defaults to 30 minutes.
	Timeout time.Duration
	// Logger receives cleanup failures.
	Logger *slog.Logger
}

func (c PruneConfig) withDefaults() PruneConfig {
	if c.Rows <= 0 {
		c.Rows = 1000000
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.Window <= 0 {
		c.Window = 10 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// TableSize is one ledger table's size after the fill.
type TableSize struct {
	Table string `json:"table"`
	Rows  int64  `json:"rows"`
	// Bytes is the table with its indexes (and TOAST); Heap and Index
	// split it where the store tells them apart.
	Bytes int64 `json:"bytes"`
	Heap  int64 `json:"heap_bytes,omitempty"`
	Index int64 `json:"index_bytes,omitempty"`
}

// HotPath is the hot path's figures in one phase.
type HotPath struct {
	Phase   string        `json:"phase"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Tasks   int           `json:"tasks"`
	// Per operation and for the whole task (Create + BeginRun + EndRun).
	Ops map[string]Quantiles `json:"ops"`
}

// Quantiles of one operation's latency.
type Quantiles struct {
	N   int           `json:"n"`
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

// PruneReport is a whole pruning measurement.
type PruneReport struct {
	Ledger    string        `json:"ledger"`
	Store     string        `json:"store"`
	Rows      int           `json:"rows"`
	Workers   int           `json:"workers"`
	Fill      time.Duration `json:"fill_ns"`
	Sizes     []TableSize   `json:"sizes"`
	Total     int64         `json:"total_bytes"`
	Baseline  HotPath       `json:"baseline"`
	During    HotPath       `json:"during_prune"`
	Prune     time.Duration `json:"prune_ns"`
	Pruned    int           `json:"pruned"`
	PruneErr  string        `json:"prune_error,omitempty"`
	LoadStart string        `json:"load_start"`
	LoadEnd   string        `json:"load_end"`
	Started   time.Time     `json:"started"`
}

// Prune fills a fresh ledger with cfg.Rows completed tasks (copies of one
// task made through the ledger's own hot path, inserted in bulk by SQL),
// measures the tables, then runs the hot path — Create, BeginRun and
// EndRun of fresh tasks from cfg.Workers goroutines, directly on the
// ledger — for cfg.Window, and again while Prune removes the filled
// tasks (a retention of one hour: the hot path's own tasks are kept).
func Prune(ctx context.Context, cfg PruneConfig, progress io.Writer) (*PruneReport, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if progress == nil {
		progress = io.Discard
	}
	ns := NewNamespace("syprune")
	dsn, clean, err := ledgerFor(cfg.LedgerDSN, ns, cfg.Logger)
	if err != nil {
		return nil, err
	}
	defer clean()
	rep := &PruneReport{Ledger: redact(cfg.LedgerDSN), Rows: cfg.Rows, Workers: cfg.Workers, LoadStart: LoadAvg(), Started: time.Now().UTC()}
	pg := isPostgres(dsn)
	rep.Store = "SQLite"
	if pg {
		rep.Store = "PostgreSQL"
	}

	// The template: one task through the hot path.
	L, err := ledger.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	tmpl, err := hotTask(ctx, L, "template")
	L.Close()
	if err != nil {
		return nil, fmt.Errorf("template task: %w", err)
	}

	fmt.Fprintf(progress, "filling %d completed tasks…\n", cfg.Rows)
	old := time.Now().Add(-48 * time.Hour)
	start := time.Now()
	if pg {
		err = fillPostgres(ctx, dsn, ns, tmpl, cfg.Rows, old, progress)
	} else {
		err = fillSQLite(ctx, sqlitePath(dsn), tmpl, cfg.Rows, old, progress)
	}
	if err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	rep.Fill = time.Since(start)
	if pg {
		rep.Sizes, err = sizesPostgres(ctx, dsn, ns)
	} else {
		rep.Sizes, err = sizesSQLite(ctx, sqlitePath(dsn))
	}
	if err != nil {
		return nil, fmt.Errorf("sizes: %w", err)
	}
	for _, s := range rep.Sizes {
		rep.Total += s.Bytes
	}

	if L, err = ledger.Open(ctx, dsn); err != nil {
		return nil, err
	}
	defer L.Close()
	fmt.Fprintf(progress, "hot path for %s without pruning…\n", cfg.Window)
	if rep.Baseline, err = hotPath(ctx, L, cfg.Workers, "baseline", time.After(cfg.Window)); err != nil {
		return rep, err
	}
	fmt.Fprintln(progress, "hot path while pruning…")
	pruned := make(chan struct{})
	var pstart time.Time
	go func() {
		defer close(pruned)
		pstart = time.Now()
		n, err := L.Prune(ctx, time.Now().Add(-time.Hour))
		rep.Prune, rep.Pruned = time.Since(pstart), n
		if err != nil {
			rep.PruneErr = err.Error()
		}
	}()
	if rep.During, err = hotPath(ctx, L, cfg.Workers, "during prune", pruned); err != nil {
		return rep, err
	}
	<-pruned
	rep.LoadEnd = LoadAvg()
	return rep, nil
}

// hotTask creates, begins and ends (completed) one task; it returns its
// ID.
func hotTask(ctx context.Context, L ledger.Ledger, worker string) (string, error) {
	t, _, err := L.Create(ctx, &ledger.Task{ID: broker.NewID(), Kind: "bench.runtime", Lane: "batch",
		Args: []byte(fmt.Sprintf(`{"t":%d}`, time.Now().UnixNano())), MaxAttempts: 25})
	if err != nil {
		return "", err
	}
	start := time.Now()
	if _, err := L.BeginRun(ctx, ledger.RunStart{ID: t.ID, Attempt: 1, Worker: worker, Start: start, Lease: 30 * time.Second}); err != nil {
		return "", err
	}
	a := ledger.Attempt{TaskID: t.ID, Number: 1, Worker: worker, Start: start, Duration: time.Since(start), Outcome: "ok"}
	_, err = L.EndRun(ctx, ledger.RunEnd{Attempt: a, Transition: &ledger.TransitionRequest{ID: t.ID, From: []ledger.State{ledger.Running},
		To: ledger.Completed, Reason: "completed", Actor: worker, IfAttemptBelow: 2}})
	return t.ID, err
}

// hotPath runs Create + BeginRun + EndRun of fresh tasks from n
// goroutines until stop, timing each operation.
func hotPath[T any](ctx context.Context, L ledger.Ledger, n int, phase string, stop <-chan T) (HotPath, error) {
	names := []string{"create", "begin run", "end run", "task"}
	type lat [4][]time.Duration
	all := make([]lat, n)
	done := make(chan struct{})
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("hot-%d", g)
			for {
				select {
				case <-done:
					return
				case <-ctx.Done():
					return
				default:
				}
				t0 := time.Now()
				t, _, err := L.Create(ctx, &ledger.Task{ID: broker.NewID(), Kind: "bench.runtime", Lane: "batch",
					Args: []byte(fmt.Sprintf(`{"t":%d}`, t0.UnixNano())), MaxAttempts: 25})
				t1 := time.Now()
				if err == nil {
					_, err = L.BeginRun(ctx, ledger.RunStart{ID: t.ID, Attempt: 1, Worker: worker, Start: t1, Lease: 30 * time.Second})
				}
				t2 := time.Now()
				if err == nil {
					a := ledger.Attempt{TaskID: t.ID, Number: 1, Worker: worker, Start: t1, Duration: t2.Sub(t1), Outcome: "ok"}
					_, err = L.EndRun(ctx, ledger.RunEnd{Attempt: a, Transition: &ledger.TransitionRequest{ID: t.ID,
						From: []ledger.State{ledger.Running}, To: ledger.Completed, Reason: "completed", Actor: worker, IfAttemptBelow: 2}})
				}
				t3 := time.Now()
				if err != nil {
					mu.Lock()
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				all[g][0] = append(all[g][0], t1.Sub(t0))
				all[g][1] = append(all[g][1], t2.Sub(t1))
				all[g][2] = append(all[g][2], t3.Sub(t2))
				all[g][3] = append(all[g][3], t3.Sub(t0))
			}
		}()
	}
	select {
	case <-stop:
	case <-ctx.Done():
	}
	close(done)
	wg.Wait()
	h := HotPath{Phase: phase, Elapsed: time.Since(start), Ops: map[string]Quantiles{}}
	if firstErr != nil {
		return h, fmt.Errorf("hot path (%s): %w", phase, firstErr)
	}
	if ctx.Err() != nil {
		return h, fmt.Errorf("hot path (%s): %w", phase, ctx.Err())
	}
	for k, name := range names {
		var xs []time.Duration
		for g := range all {
			xs = append(xs, all[g][k]...)
		}
		h.Ops[name] = quantiles(xs)
	}
	h.Tasks = h.Ops["task"].N
	return h, nil
}

func quantiles(xs []time.Duration) Quantiles {
	if len(xs) == 0 {
		return Quantiles{}
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	return Quantiles{N: len(xs), P50: xs[len(xs)/2], P99: xs[min(len(xs)-1, len(xs)*99/100)], Max: xs[len(xs)-1]}
}

// fillChunk is how many tasks one fill statement copies.
const fillChunk = 100000

// fillPostgres copies the template task rows tasks times — the task, its
// attempts and its events, every column as the store wrote it except the
// ID (a UUID-shaped 'ffffffff-…-<n>') and the times (old, a microsecond
// apart) — with INSERT … SELECT over generate_series, in chunks.
func fillPostgres(ctx context.Context, dsn, schema, tmpl string, rows int, old time.Time, progress io.Writer) error {
	conn, err := pgx.Connect(ctx, pgxDSN(dsn))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SET search_path TO `+pgx.Identifier{schema}.Sanitize()); err != nil {
		return err
	}
	idExpr := `'ffffffff-0000-7000-8000-' || lpad(g::text, 12, '0')`
	tsExpr := `$2::timestamptz + g * interval '1 microsecond'`
	repl := map[string]map[string]string{
		"ledger_tasks":    {"id": idExpr, "created_at": tsExpr, "updated_at": tsExpr},
		"ledger_attempts": {"task_id": idExpr, "start_at": tsExpr},
		"ledger_events":   {"task_id": idExpr, "at": tsExpr},
	}
	for _, table := range []string{"ledger_tasks", "ledger_attempts", "ledger_events"} {
		cr, err := conn.Query(ctx, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = $1 AND table_name = $2 AND is_generated = 'NEVER' AND identity_generation IS NULL
			ORDER BY ordinal_position`, schema, table)
		if err != nil {
			return err
		}
		cols, err := pgx.CollectRows(cr, pgx.RowTo[string])
		if err != nil {
			return err
		}
		sel := make([]string, len(cols))
		for i, c := range cols {
			sel[i] = pgx.Identifier{c}.Sanitize()
			if e, ok := repl[table][c]; ok {
				sel[i] = e
			}
			cols[i] = pgx.Identifier{c}.Sanitize()
		}
		key := "task_id"
		if table == "ledger_tasks" {
			key = "id"
		}
		q := `INSERT INTO ` + table + ` (` + strings.Join(cols, ", ") + `) SELECT ` + strings.Join(sel, ", ") +
			` FROM ` + table + ` t, generate_series($3::bigint, $4::bigint) g WHERE t.` + key + ` = $1`
		if table == "ledger_tasks" {
			q += ` ORDER BY g`
		}
		for lo := 1; lo <= rows; lo += fillChunk {
			hi := min(rows, lo+fillChunk-1)
			if _, err := conn.Exec(ctx, q, tmpl, old, lo, hi); err != nil {
				return fmt.Errorf("%s: %w", table, err)
			}
		}
		fmt.Fprintf(progress, "  %s filled\n", table)
	}
	// As autovacuum would soon: planner statistics for Prune's query.
	_, err = conn.Exec(ctx, `ANALYZE ledger_tasks, ledger_attempts, ledger_events`)
	return err
}

func sizesPostgres(ctx context.Context, dsn, schema string) ([]TableSize, error) {
	conn, err := pgx.Connect(ctx, pgxDSN(dsn))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var out []TableSize
	for _, table := range []string{"ledger_tasks", "ledger_attempts", "ledger_events", "ledger_steps", "ledger_effects"} {
		id := pgx.Identifier{schema, table}.Sanitize()
		var s TableSize
		s.Table = table
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+id+`), pg_total_relation_size($1::regclass),
			pg_table_size($1::regclass), pg_indexes_size($1::regclass)`, id).Scan(&s.Rows, &s.Bytes, &s.Heap, &s.Index); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// sqlitePath is the file of a sqlite:// DSN.
func sqlitePath(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	if u.Path != "" {
		return u.Path
	}
	return u.Opaque
}

// fillSQLite is fillPostgres for SQLite: a recursive CTE for the series;
// times are Unix nanoseconds.
func fillSQLite(ctx context.Context, path, tmpl string, rows int, old time.Time, progress io.Writer) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	idExpr := `printf('ffffffff-0000-7000-8000-%012d', g.x)`
	tsExpr := fmt.Sprintf(`(%d + g.x * 1000)`, old.UnixNano())
	repl := map[string]map[string]string{
		"ledger_tasks":    {"id": idExpr, "created_at": tsExpr, "updated_at": tsExpr, "seq": "NULL"},
		"ledger_attempts": {"task_id": idExpr, "start_at": tsExpr},
		"ledger_events":   {"task_id": idExpr, "at": tsExpr},
	}
	for _, table := range []string{"ledger_tasks", "ledger_attempts", "ledger_events"} {
		cr, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
		if err != nil {
			return err
		}
		var cols []string
		for cr.Next() {
			var c string
			if err := cr.Scan(&c); err != nil {
				cr.Close()
				return err
			}
			cols = append(cols, c)
		}
		cr.Close()
		sel := make([]string, len(cols))
		for i, c := range cols {
			sel[i] = "t." + c
			if e, ok := repl[table][c]; ok {
				sel[i] = e
			}
		}
		key := "task_id"
		if table == "ledger_tasks" {
			key = "id"
		}
		q := `WITH RECURSIVE g(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM g WHERE x < ?)
			INSERT INTO ` + table + ` (` + strings.Join(cols, ", ") + `) SELECT ` + strings.Join(sel, ", ") +
			` FROM g, ` + table + ` t WHERE t.` + key + ` = ? ORDER BY g.x`
		for lo := 1; lo <= rows; lo += fillChunk {
			hi := min(rows, lo+fillChunk-1)
			if _, err := db.ExecContext(ctx, q, lo, hi, tmpl); err != nil {
				return fmt.Errorf("%s: %w", table, err)
			}
		}
		fmt.Fprintf(progress, "  %s filled\n", table)
	}
	_, err = db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	if err == nil {
		_, err = db.ExecContext(ctx, `ANALYZE`)
	}
	return err
}

func sizesSQLite(ctx context.Context, path string) ([]TableSize, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var out []TableSize
	for _, table := range []string{"ledger_tasks", "ledger_attempts", "ledger_events", "ledger_steps", "ledger_effects"} {
		s := TableSize{Table: table}
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&s.Rows); err != nil {
			return nil, err
		}
		// dbstat, when the build has it: the table's pages and its
		// indexes' (named in sqlite_schema).
		err := db.QueryRowContext(ctx, `SELECT coalesce(sum(CASE WHEN d.name = ? THEN pgsize END), 0), coalesce(sum(pgsize), 0)
			FROM dbstat d WHERE d.name = ? OR d.name IN (SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?)`,
			table, table, table).Scan(&s.Heap, &s.Bytes)
		if err == nil {
			s.Index = s.Bytes - s.Heap
		}
		out = append(out, s)
	}
	if fi, err := os.Stat(path); err == nil {
		out = append(out, TableSize{Table: "(database file)", Bytes: fi.Size()})
	}
	return out, nil
}

// WriteTable prints the pruning report.
func (rep *PruneReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "ledger %s (%s) · %d completed tasks filled in %.1fs · hot path: Create + BeginRun + EndRun from %d goroutines\n",
		rep.Ledger, rep.Store, rep.Rows, rep.Fill.Seconds(), rep.Workers)
	fmt.Fprintf(w, "load average: %s at start (%s), %s at end\n\n", rep.LoadStart, rep.Started.Format("15:04 MST"), rep.LoadEnd)
	fmt.Fprintln(w, "| table | rows | total MB | table MB | indexes MB | MB per million tasks |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	per := func(b int64) float64 { return mb(b) * 1e6 / float64(max(rep.Rows, 1)) }
	var sum int64
	for _, s := range rep.Sizes {
		if s.Table == "(database file)" {
			fmt.Fprintf(w, "| %s | | %.1f | | | %.1f |\n", s.Table, mb(s.Bytes), per(s.Bytes))
			continue
		}
		sum += s.Bytes
		perM := "–" // an empty table's few pages do not scale with tasks
		if s.Rows > 0 {
			perM = fmt.Sprintf("%.1f", per(s.Bytes))
		}
		fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %.1f | %s |\n", s.Table, s.Rows, mb(s.Bytes), mb(s.Heap), mb(s.Index), perM)
	}
	fmt.Fprintf(w, "| all ledger tables | | %.1f | | | %.1f |\n\n", mb(sum), per(sum))
	prune := fmt.Sprintf("Prune removed %d tasks in %.1fs (%.0f tasks/s)", rep.Pruned, rep.Prune.Seconds(), float64(rep.Pruned)/max(rep.Prune.Seconds(), 1e-9))
	if rep.PruneErr != "" {
		prune += "; it failed: " + rep.PruneErr
	}
	fmt.Fprintln(w, prune)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| phase | hot-path tasks/s | create p50 / p99 ms | begin run p50 / p99 ms | end run p50 / p99 ms | whole task p50 / p99 / max ms |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, h := range []HotPath{rep.Baseline, rep.During} {
		q := func(k string) string { return fmt.Sprintf("%.2f / %.2f", ms(h.Ops[k].P50), ms(h.Ops[k].P99)) }
		rate := float64(h.Tasks) / max(h.Elapsed.Seconds(), 1e-9)
		fmt.Fprintf(w, "| %s (%.1fs) | %.0f | %s | %s | %s | %s / %.1f |\n", h.Phase, h.Elapsed.Seconds(), rate, q("create"), q("begin run"), q("end run"),
			q("task"), ms(h.Ops["task"].Max))
	}
	return nil
}

// WriteJSON prints the pruning report as JSON.
func (rep *PruneReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
