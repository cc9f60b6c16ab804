package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// TestArgRows_SameRowsAsOrdinality checks argRows (the arrays unnested in
// the select list, the ordinals as one more array) against the form it
// replaced, unnest(…) WITH ORDINALITY in FROM: the same rows, in the same
// order, with NULL elements in every position and every type the array
// statements use.
func TestArgRows_SameRowsAsOrdinality(t *testing.T) {
	dsn := testenv.Postgres.Endpoint(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	cols := []string{"id text", "n integer", "big bigint", "flag boolean", "at timestamptz", "data bytea"}
	s := func(v string) *string { return &v }
	i32 := func(v int32) *int32 { return &v }
	i64 := func(v int64) *int64 { return &v }
	bl := func(v bool) *bool { return &v }
	at := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	ts := func(d time.Duration) *time.Time { v := at.Add(d); return &v }
	args := []any{
		[]*string{s("a"), s("b"), nil, s("d")},
		[]*int32{i32(1), nil, i32(3), i32(-4)},
		[]*int64{nil, i64(2), i64(1 << 40), i64(0)},
		[]*bool{bl(true), bl(false), nil, bl(true)},
		[]*time.Time{ts(0), nil, ts(time.Second), ts(time.Hour)},
		[][]byte{{1, 2}, nil, {}, {0xff}},
	}
	var names []string
	var params []string
	for i, c := range cols {
		name, typ, _ := strings.Cut(c, " ")
		names = append(names, name)
		params = append(params, "$"+string(rune('1'+i))+"::"+typ+"[]")
	}
	rowsText := func(sql string, args ...any) []string {
		t.Helper()
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return out
	}
	old := rowsText(`SELECT v::text FROM unnest(`+strings.Join(params, ", ")+`) WITH ORDINALITY AS v(`+strings.Join(names, ", ")+`, ord)`, args...)
	k := &batchKind{ordinals: true}
	rs := make([]*groupReq, 4)
	for i := range rs {
		var one []any
		for _, a := range args {
			switch a := a.(type) {
			case []*string:
				one = append(one, a[i])
			case []*int32:
				one = append(one, a[i])
			case []*int64:
				one = append(one, a[i])
			case []*bool:
				one = append(one, a[i])
			case []*time.Time:
				one = append(one, a[i])
			case [][]byte:
				one = append(one, a[i])
			}
		}
		rs[i] = &groupReq{args: one}
	}
	got := rowsText(`SELECT v::text FROM (`+argRows(cols...)+`) v`, k.arrays(rs)...)
	if len(old) != 4 || strings.Join(got, "\n") != strings.Join(old, "\n") {
		t.Fatalf("argRows rows:\n%s\nWITH ORDINALITY rows:\n%s", strings.Join(got, "\n"), strings.Join(old, "\n"))
	}
}

// TestArrayKinds_NoFunctionScan: the array statements of the hot path
// open with argRows and take the ordinals (a FROM unnest there would
// bring back a tuplestore per array).
func TestArrayKinds_NoFunctionScan(t *testing.T) {
	for _, k := range []*batchKind{createKind, beginRunKind, endRunKind, beginRunLeanKind, endRunLeanKind, putStepKind, beginEffectKind, setEffectKind} {
		if !k.ordinals || strings.Contains(k.array, "FROM unnest") || !strings.Contains(k.array, "SELECT unnest($1::text[]) AS ") {
			t.Errorf("%s: array statement does not open with argRows:\n%.300s", k.name, k.array)
		}
	}
}
