package embedded

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// schemaV1 is the schema version 1 wrote (sy_messages.seq AUTOINCREMENT).
var schemaV1 = []string{
	`CREATE TABLE sy_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
	`CREATE TABLE sy_messages (
		seq          INTEGER PRIMARY KEY AUTOINCREMENT,
		ns           TEXT NOT NULL,
		lane         TEXT NOT NULL,
		dead         INTEGER NOT NULL DEFAULT 0,
		id           TEXT NOT NULL,
		kind         TEXT NOT NULL,
		body         BLOB,
		headers      BLOB,
		tenant       TEXT NOT NULL DEFAULT '',
		idem_key     TEXT NOT NULL DEFAULT '',
		ord_key      TEXT NOT NULL DEFAULT '',
		run_at       INTEGER NOT NULL DEFAULT 0,
		enqueued_at  INTEGER NOT NULL,
		max_attempts INTEGER NOT NULL DEFAULT 0,
		visible_at   INTEGER NOT NULL,
		attempts     INTEGER NOT NULL DEFAULT 0,
		lease_token  INTEGER NOT NULL DEFAULT 0,
		dead_letter  BLOB
	)`,
	`CREATE INDEX sy_messages_ready ON sy_messages (ns, lane, dead, visible_at, seq)`,
	`CREATE INDEX sy_messages_order ON sy_messages (ns, lane, ord_key, seq) WHERE ord_key <> ''`,
	`CREATE TABLE sy_dedup (
		ns TEXT NOT NULL, lane TEXT NOT NULL, tenant TEXT NOT NULL, key TEXT NOT NULL,
		id TEXT NOT NULL, expires_at INTEGER NOT NULL,
		PRIMARY KEY (ns, lane, tenant, key)
	) WITHOUT ROWID`,
	`INSERT INTO sy_meta (key, value) VALUES ('schema_version', '1')`,
}

// TestMigrate_V1 opens a version 1 database holding ready, ordered, leased
// and dead messages and a deduplication record: the table is rebuilt
// without AUTOINCREMENT, every row keeps its seq, and the queue goes on as
// before (order, leases, dead letters, deduplication, new seqs above the
// old ones).
func TestMigrate_V1(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UnixNano()
	const ns, lane = "default", "l"
	dl, _ := broker.EncodeDeadLetter(&broker.DeadLetter{Reason: broker.ReasonMaxAttempts, Error: "boom"})
	path := oldDatabase(t, schemaV1, [][]any{
		{5, ns, lane, 0, "01ready0000000000000000001", []byte("a"), "", now, now - 3, 0, 0, nil},
		{7, ns, lane, 0, "01ready0000000000000000002", []byte("b"), "o", now, now - 2, 0, 0, nil},
		{9, ns, lane, 0, "01leased000000000000000003", []byte("c"), "o", now, now + int64(time.Hour), 1, 42, nil},
		{11, ns, lane, 1, "01dead00000000000000000004", []byte("d"), "", now, now, 3, 0, dl},
	}, ns, lane, "01ready0000000000000000001", `UPDATE sqlite_sequence SET seq = 20 WHERE name = 'sy_messages'`)

	d, err := open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var v, ddl string
	if err := d.db.QueryRowContext(ctx, `SELECT value FROM sy_meta WHERE key = 'schema_version'`).Scan(&v); err != nil || v != "3" {
		t.Fatalf("schema_version %q, %v; want 3", v, err)
	}
	if err := d.db.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE name = 'sy_messages'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToUpper(ddl), "AUTOINCREMENT") {
		t.Fatalf("sy_messages still has AUTOINCREMENT: %s", ddl)
	}
	var idx int
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN ('sy_messages_ready', 'sy_messages_order')`).Scan(&idx); err != nil || idx != 2 {
		t.Fatalf("indexes: %d, %v; want 2", idx, err)
	}
	var leftover int
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name IN ('sy_messages_v2', 'sy_messages_v3')`).Scan(&leftover); err != nil || leftover != 0 {
		t.Fatalf("sy_messages_v2 or _v3 left: %d, %v", leftover, err)
	}

	// The ready messages come in their old order; the leased one does not.
	ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || string(ds[0].Body) != "a" || string(ds[1].Body) != "b" || ds[0].Handle.(handle).seq != 5 || ds[1].Handle.(handle).seq != 7 {
		t.Fatalf("received %d: %v", len(ds), ds)
	}
	if err := d.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}
	// The old lease (token 42) still guards seq 9.
	stale := &broker.Delivery{Message: broker.Message{ID: "01leased000000000000000003", Lane: lane}, Handle: handle{seq: 9, token: 42}}
	if err := d.Extend(ctx, []*broker.Delivery{stale}, time.Minute); err != nil {
		t.Fatalf("extend under the migrated lease: %v", err)
	}
	// The dead letter keeps its reason.
	dead, err := d.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 10, Lease: time.Minute, DeadLetters: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].DeadLetter == nil || dead[0].DeadLetter.Reason != broker.ReasonMaxAttempts {
		t.Fatalf("dead letters: %v", dead)
	}
	// Deduplication records survive; a new message gets a seq above the old ones.
	wantDedupAndNewSeq(t, d, lane, "01ready0000000000000000001", 11)

	// Reopening a version 3 database changes nothing.
	d2, err := open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	d2.Close()
}

// TestMigrate_NewerVersionRefused: a database written by a later build is
// refused, untouched.
func TestMigrate_NewerVersionRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v9.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`CREATE TABLE sy_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`, `INSERT INTO sy_meta VALUES ('schema_version', '9')`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	_, err = open(ctx, Config{Path: path})
	if err == nil || !strings.Contains(err.Error(), "schema version 9") {
		t.Fatalf("open of a version 9 database: %v", err)
	}
}

// schemaV2 is the schema version 2 wrote: version 1's without
// AUTOINCREMENT (a row's namespace and lane still as text, in the row and
// in its indexes).
var schemaV2 = func() []string {
	s := slices.Clone(schemaV1)
	s[1] = strings.Replace(s[1], " AUTOINCREMENT", "", 1)
	if s[1] == schemaV1[1] {
		panic("schemaV2: version 1's sy_messages has no AUTOINCREMENT to drop")
	}
	s[len(s)-1] = `INSERT INTO sy_meta (key, value) VALUES ('schema_version', '2')`
	return s
}()

// TestMigrate_V2 opens a version 2 database holding ready, ordered, leased
// and dead messages on two lanes of two namespaces, and a deduplication
// record: each namespace and lane gets a lane id, every row keeps its seq,
// attempts, lease and dead letter, and the queue goes on as before (order
// by key, leases, dead letters with reasons, deduplication, stats, new seqs
// above the old ones), each namespace seeing only its own messages.
func TestMigrate_V2(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UnixNano()
	const ns, other, lane, lane2 = "default", "other", "l", "l2"
	dl, _ := broker.EncodeDeadLetter(&broker.DeadLetter{Reason: broker.ReasonMaxAttempts, Error: "boom"})
	path := oldDatabase(t, schemaV2, [][]any{
		{3, ns, lane, 0, "01leased000000000000000001", []byte("o1"), "o", now, now + int64(time.Hour), 1, 42, nil},
		{5, ns, lane, 0, "01ready0000000000000000002", []byte("a"), "", now, now - 3, 2, 0, nil},
		{7, ns, lane, 0, "01ready0000000000000000003", []byte("o2"), "o", now, now - 4, 0, 0, nil},
		{8, ns, lane, 0, "01ready0000000000000000004", []byte("p1"), "p", now, now - 2, 0, 0, nil},
		{9, other, lane, 0, "01other0000000000000000005", []byte("x"), "", now, now - 5, 0, 0, nil},
		{10, ns, lane2, 0, "01lane20000000000000000006", []byte("y"), "", now, now - 5, 0, 0, nil},
		{11, ns, lane, 1, "01dead00000000000000000007", []byte("d"), "", now, now, 3, 0, dl},
	}, ns, lane, "01ready0000000000000000002")

	d, err := open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var v string
	if err := d.db.QueryRowContext(ctx, `SELECT value FROM sy_meta WHERE key = 'schema_version'`).Scan(&v); err != nil || v != "3" {
		t.Fatalf("schema_version %q, %v; want 3", v, err)
	}
	var lanes, leftover, textCols int
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) FROM sy_lanes`).Scan(&lanes); err != nil || lanes != 3 {
		t.Fatalf("sy_lanes: %d rows, %v; want 3", lanes, err)
	}
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'sy_messages_v3'`).Scan(&leftover); err != nil || leftover != 0 {
		t.Fatalf("sy_messages_v3 left: %d, %v", leftover, err)
	}
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('sy_messages') WHERE name IN ('ns', 'lane')`).Scan(&textCols); err != nil || textCols != 0 {
		t.Fatalf("sy_messages still has ns or lane: %d, %v", textCols, err)
	}
	st, err := d.Stats(ctx, lane)
	if err != nil || st.Ready != 3 || st.InFlight != 1 || st.DeadLettered != 1 {
		t.Fatalf("stats %+v, %v; want 3 ready, 1 in flight, 1 dead", st, err)
	}
	if ls, err := d.Lanes(ctx); err != nil || len(ls) != 2 || ls[0] != lane || ls[1] != lane2 {
		t.Fatalf("lanes %v, %v", ls, err)
	}

	// Ready messages in their old order; key "o" waits for its leased
	// older message (seq 3), key "p" does not; attempts are kept.
	ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || string(ds[0].Body) != "a" || string(ds[1].Body) != "p1" || ds[0].Handle.(handle).seq != 5 || ds[0].Attempt != 3 {
		t.Fatalf("received %d: %+v", len(ds), ds)
	}
	// The old lease (token 42) still guards seq 3; once acked, key "o" goes on.
	leased := &broker.Delivery{Message: broker.Message{ID: "01leased000000000000000001", Lane: lane}, Handle: handle{seq: 3, token: 42}}
	if err := d.Extend(ctx, []*broker.Delivery{leased}, time.Minute); err != nil {
		t.Fatalf("extend under the migrated lease: %v", err)
	}
	if err := d.Ack(ctx, append(ds, leased)); err != nil {
		t.Fatal(err)
	}
	ds, err = d.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 10, Lease: time.Minute})
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "o2" {
		t.Fatalf("after the ack of key o's first: %v, %v", ds, err)
	}
	// The dead letter keeps its reason.
	dead, err := d.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 10, Lease: time.Minute, DeadLetters: true})
	if err != nil || len(dead) != 1 || dead[0].DeadLetter == nil || dead[0].DeadLetter.Reason != broker.ReasonMaxAttempts || dead[0].DeadLetter.Error != "boom" {
		t.Fatalf("dead letters: %v, %v", dead, err)
	}
	// Another lane of the namespace, and another namespace, keep theirs.
	if ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: lane2, Max: 10, Lease: time.Minute}); err != nil || len(ds) != 1 || string(ds[0].Body) != "y" {
		t.Fatalf("lane %s: %v, %v", lane2, ds, err)
	}
	d2, err := open(ctx, Config{Path: path, Namespace: other})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if ds, err := d2.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 10, Lease: time.Minute}); err != nil || len(ds) != 1 || string(ds[0].Body) != "x" {
		t.Fatalf("namespace %s: %v, %v", other, ds, err)
	}
	// Deduplication records survive; a new message gets a seq above the old ones.
	wantDedupAndNewSeq(t, d, lane, "01ready0000000000000000002", 11)
}

// oldDatabase writes a database file in an older schema: its statements,
// the message rows (seq, ns, lane, dead, id, body, ord_key, enqueued_at,
// visible_at, attempts, lease_token, dead_letter; kind "k"), a
// deduplication record of key "key1" in ns and lane for dedupID, then the
// extra statements. It returns the file's path.
func oldDatabase(t *testing.T, schema []string, rows [][]any, ns, lane, dedupID string, extra ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "old.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, q := range schema {
		exec(q)
	}
	for _, r := range rows {
		exec(`INSERT INTO sy_messages (seq, ns, lane, dead, id, kind, body, ord_key, enqueued_at, visible_at, attempts, lease_token, dead_letter)
			VALUES (?, ?, ?, ?, ?, 'k', ?, ?, ?, ?, ?, ?, ?)`, r...)
	}
	exec(`INSERT INTO sy_dedup VALUES (?, ?, '', 'key1', ?, ?)`, ns, lane, dedupID, time.Now().Add(time.Hour).UnixNano())
	for _, q := range extra {
		exec(q)
	}
	return path
}

// wantDedupAndNewSeq checks a migrated database's deduplication and seqs:
// a publish of key "key1" is a duplicate of dedupID, and a new message
// gets a seq above maxSeq and is the only one ready on lane.
func wantDedupAndNewSeq(t *testing.T, d *Driver, lane, dedupID string, maxSeq int64) {
	t.Helper()
	ctx := context.Background()
	res, err := d.Publish(ctx, []*broker.Message{
		{ID: broker.NewID(), Lane: lane, Kind: "k", IdempotencyKey: "key1"},
		{ID: broker.NewID(), Lane: lane, Kind: "k", Body: []byte("new")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Duplicate || res[0].ID != dedupID || res[1].Duplicate {
		t.Fatalf("publish results: %+v", res)
	}
	ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 10, Lease: time.Minute})
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "new" || ds[0].Handle.(handle).seq <= maxSeq {
		t.Fatalf("after migration received %v, %v", ds, err)
	}
}
