package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/spend"
)

// Group fields of a spend report.
var groupCols = map[string]string{
	"tenant": "tenant", "kind": "kind", "run": "run_id", "provider": "provider", "model": "model",
	"mode": "mode", "cache_key": "cache_key", "state": "state",
}

// SpendQuery selects a spend report.
type SpendQuery struct {
	// Since and Until bound the reservation time; zero means open.
	Since, Until time.Time
	// Tenant keeps one tenant; "" keeps all.
	Tenant string
	// By groups rows: any of tenant, kind, run, provider, model, mode,
	// cache_key, state. Nil sums everything into one row.
	By []string
}

// SpendRow is one group of a report. Fields not grouped by are empty.
type SpendRow struct {
	Group map[string]string
	Calls int64
	Usage spend.Usage
	Cost  spend.Micros
}

// CachedShare is the share of input tokens read from the prompt cache, 0..1.
func (r SpendRow) CachedShare() float64 {
	in := r.Usage.Input + r.Usage.CachedInput
	if in == 0 {
		return 0
	}
	return float64(r.Usage.CachedInput) / float64(in)
}

// Spend reports settled and reserved spend (state distinguishes them when
// grouped by; Cost of a reserved row is its estimate).
func (s *Store) Spend(ctx context.Context, q SpendQuery) ([]SpendRow, error) {
	cols, err := groupColumns(q.By)
	if err != nil {
		return nil, err
	}
	sel := "COUNT(*), COALESCE(SUM(input), 0), COALESCE(SUM(cached_input), 0), COALESCE(SUM(output), 0), COALESCE(SUM(micros), 0)"
	if len(cols) > 0 {
		sel = strings.Join(cols, ", ") + ", " + sel
	}
	where, args := []string{"1 = 1"}, []any{}
	if !q.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, ns(q.Since))
	}
	if !q.Until.IsZero() {
		where, args = append(where, "at < ?"), append(args, ns(q.Until))
	}
	if q.Tenant != "" {
		where, args = append(where, "tenant = ?"), append(args, q.Tenant)
	}
	query := "SELECT " + sel + " FROM switchyard_spend WHERE " + strings.Join(where, " AND ")
	if len(cols) > 0 {
		query += " GROUP BY " + strings.Join(cols, ", ") + " ORDER BY " + strings.Join(cols, ", ")
	}
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SpendRow
	for rows.Next() {
		var r SpendRow
		var cost int64
		if r.Group, err = scanGrouped(rows, q.By, &r.Calls, &r.Usage.Input, &r.Usage.CachedInput, &r.Usage.Output, &cost); err != nil {
			return nil, err
		}
		r.Cost = spend.Micros(cost)
		out = append(out, r)
	}
	return out, rows.Err()
}

var _ spend.Reporter = (*Store)(nil)

// SpendSeries implements spend.Reporter: Spend per Step-long bucket of
// [Since, Until).
func (s *Store) SpendSeries(ctx context.Context, q spend.SeriesQuery) ([]spend.SeriesRow, error) {
	if q.Step <= 0 || q.Since.IsZero() || q.Until.IsZero() || !q.Until.After(q.Since) {
		return nil, fmt.Errorf("sqlstore: a spend series needs Since before Until and a positive Step, got %v..%v step %v", q.Since, q.Until, q.Step)
	}
	cols, err := groupColumns(q.By)
	if err != nil {
		return nil, err
	}
	since, until := ns(q.Since), ns(q.Until)
	// The bucket expression carries its two integers inline (they are
	// int64s, not text), so that GROUP BY repeats it verbatim.
	bucket := fmt.Sprintf("(at - %d) / %d", since, int64(q.Step))
	sel := bucket + ", COUNT(*), COALESCE(SUM(input), 0), COALESCE(SUM(cached_input), 0), COALESCE(SUM(output), 0), COALESCE(SUM(micros), 0)"
	if len(cols) > 0 {
		sel = strings.Join(cols, ", ") + ", " + sel
	}
	args := []any{since, until}
	where := "at >= ? AND at < ?"
	if q.Tenant != "" {
		where, args = where+" AND tenant = ?", append(args, q.Tenant)
	}
	group := append(append([]string{}, cols...), bucket)
	query := "SELECT " + sel + " FROM switchyard_spend WHERE " + where + " GROUP BY " + strings.Join(group, ", ") + " ORDER BY " + strings.Join(group, ", ")
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []spend.SeriesRow
	for rows.Next() {
		var r spend.SeriesRow
		var cost int64
		if r.Group, err = scanGrouped(rows, q.By, &r.Bucket, &r.Calls, &r.Usage.Input, &r.Usage.CachedInput, &r.Usage.Output, &cost); err != nil {
			return nil, err
		}
		r.Cost = spend.Micros(cost)
		out = append(out, r)
	}
	return out, rows.Err()
}

// groupColumns maps the report's groupings (tenant, model, …) to their
// columns.
func groupColumns(by []string) ([]string, error) {
	cols := make([]string, 0, len(by))
	for _, f := range by {
		c, ok := groupCols[f]
		if !ok {
			return nil, fmt.Errorf("sqlstore: cannot group spend by %q (tenant, kind, run, provider, model, mode, cache_key, state)", f)
		}
		cols = append(cols, c)
	}
	return cols, nil
}

// scanGrouped scans a report row: the values of the groupings by, in
// order, then the row's figures into tail; it returns the group.
func scanGrouped(rows *sql.Rows, by []string, tail ...any) (map[string]string, error) {
	vals := make([]string, len(by))
	dst := make([]any, 0, len(by)+len(tail))
	for i := range vals {
		dst = append(dst, &vals[i])
	}
	if err := rows.Scan(append(dst, tail...)...); err != nil {
		return nil, err
	}
	g := make(map[string]string, len(by))
	for i, f := range by {
		g[f] = vals[i]
	}
	return g, nil
}
