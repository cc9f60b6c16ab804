package embedded

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestQueryPlans checks that the statements run for every message look
// rows up by key or index: a full scan of sy_messages in one of them makes
// each operation cost as much as the whole queue.
func TestQueryPlans(t *testing.T) {
	ctx := context.Background()
	d, err := open(ctx, Config{Path: filepath.Join(t.TempDir(), "p.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	plan := func(q string) string {
		t.Helper()
		args := make([]any, strings.Count(q, "?"))
		rows, err := d.db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, detail)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	var qs []string
	for _, n := range ackSizes {
		qs = append(qs, ackSQL[n])
	}
	qs = append(qs, receiveSQL, receiveUnorderedSQL, receiveDeadSQL)
	for _, q := range qs {
		p := plan(q)
		for _, line := range strings.Split(p, "\n") {
			if strings.HasPrefix(line, "SCAN sy_messages") || strings.HasPrefix(line, "SCAN m") || strings.HasPrefix(line, "SCAN p") {
				t.Errorf("%.70s…: full scan in plan:\n%s", q, p)
			}
		}
		if q == receiveSQL && !strings.Contains(p, "sy_messages_order") {
			t.Errorf("receive: the ordering check does not use sy_messages_order:\n%s", p)
		}
	}
	// The ready index ends with seq only implicitly (the rowid SQLite
	// appends): receive and browse must still read it in (visible_at, seq)
	// order, without sorting.
	for _, q := range []string{receiveSQL, receiveUnorderedSQL, browseReadySQL} {
		p := plan(q)
		if !strings.Contains(p, "sy_messages_ready") || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("%.70s…: not read in index order:\n%s", q, p)
		}
	}
}
