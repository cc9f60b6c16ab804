package embedded_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestOpen_PathsAreEscaped: the path goes into a SQLite file: URI, where
// "#", "?" and "%" mean something; b%23c.db opened "b" and dropped the WAL
// and busy-timeout pragmas. Each path now opens the file it names, in WAL
// mode, and a NUL in the path is refused.
func TestOpen_PathsAreEscaped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	for raw, file := range map[string]string{"b%23c.db": "b#c.db", "q%3Fx.db": "q?x.db", "p%2541.db": "p%41.db"} {
		b, err := broker.Open(ctx, "embedded://"+dir+"/"+raw, nil)
		if err != nil {
			t.Fatalf("open %s: %v", raw, err)
		}
		if _, err := b.PublishOne(ctx, &broker.Message{Lane: "l", Kind: "k", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{file, file + "-wal"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("%s: %s is missing (wrong file or no WAL): %v", raw, f, err)
			}
		}
		b.Close()
	}
	for _, f := range []string{"b", "q", "p", "pA.db"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("a truncated or unescaped path opened %s", f)
		}
	}
	if b, err := broker.Open(ctx, "embedded://"+dir+"/nul%00.db", nil); !errors.Is(err, broker.ErrInvalid) {
		if b != nil {
			b.Close()
		}
		t.Errorf("a NUL in the path: %v, want ErrInvalid", err)
	}
}

// TestOpen_ForeignFileUnchanged: a file that is not a Switchyard embedded
// database — not SQLite at all, or another application's SQLite database —
// fails at open with ErrInvalid and is left byte for byte as it was (before,
// another SQLite database was switched to WAL and got the broker's tables).
func TestOpen_ForeignFileUnchanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	other := filepath.Join(dir, "app.db")
	db, err := sql.Open("sqlite", "file:"+other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes (text) VALUES ('keep me')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("plain text\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{other, text} {
		before, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := broker.Open(ctx, "embedded://"+f, nil)
		if err == nil {
			b.Close()
			t.Fatalf("open %s succeeded", f)
		}
		if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "not a Switchyard SQLite database") {
			t.Errorf("open %s: %v, want ErrInvalid saying it is not a Switchyard database", f, err)
		}
		after, _ := os.ReadFile(f)
		if !bytes.Equal(before, after) {
			t.Errorf("%s was modified by the failed open", f)
		}
		if _, err := os.Stat(f + "-wal"); err == nil {
			t.Errorf("%s got a WAL file", f)
		}
	}
	// A Switchyard database opens again, and an empty file becomes one.
	own := "embedded://" + filepath.Join(dir, "own.db")
	for i := 0; i < 2; i++ {
		b, err := broker.Open(ctx, own, nil)
		if err != nil {
			t.Fatalf("open own database (%d): %v", i, err)
		}
		b.Close()
	}
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := broker.Open(ctx, "embedded://"+empty, nil)
	if err != nil {
		t.Fatalf("open an empty file: %v", err)
	}
	b.Close()
}

// TestReceive_BadIDRowDeadLettered: a row whose ID was tampered with
// (empty, overlong, control characters) is dead-lettered as undecodable at
// receive instead of reaching the runtime, where the ledger refuses it and
// it looped.
func TestReceive_BadIDRowDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	b, err := broker.Open(ctx, "embedded://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ids := []string{"", strings.Repeat("i", 300), "a\tb"}
	for range ids {
		if _, err := b.PublishOne(ctx, &broker.Message{Lane: "l", Kind: "k", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i, id := range ids {
		if _, err := db.Exec(`UPDATE sy_messages SET id = ? WHERE seq = ?`, id, i+1); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 10, Wait: 200 * time.Millisecond, Lease: time.Minute})
	if err != nil || len(ds) != 0 {
		t.Fatalf("receive: %d deliveries, %v; want none", len(ds), err)
	}
	dead, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 10, Lease: time.Minute, DeadLetters: true})
	if err != nil || len(dead) != len(ids) {
		t.Fatalf("dead letters: %d, %v; want %d", len(dead), err, len(ids))
	}
	for _, d := range dead {
		if d.DeadLetter.Reason != broker.ReasonUndecodable || !strings.Contains(d.DeadLetter.Error, "id") {
			t.Errorf("dead letter %+v", d.DeadLetter)
		}
	}
}

// TestReceive_CancelledReturnsContextError: a Receive cancelled at any
// point returns the context's error (not "transaction has already been
// committed or rolled back"), or its deliveries; a cancelled one holds
// nothing and spends no attempt. Bounded: 300 rounds.
func TestReceive_CancelledReturnsContextError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, err := broker.Open(ctx, "embedded://"+filepath.Join(t.TempDir(), "q.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := &broker.Message{Lane: "l", Kind: "k", Body: []byte("x"), MaxAttempts: 1000}
	if _, err := b.PublishOne(ctx, m); err != nil {
		t.Fatal(err)
	}
	taken := 0
	for i := 0; i < 300; i++ {
		rctx, cancel := context.WithTimeout(ctx, time.Duration(i%50)*20*time.Microsecond)
		ds, err := b.Receive(rctx, broker.ReceiveRequest{Lane: "l", Max: 1, Wait: 5 * time.Millisecond, Lease: time.Minute})
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) || len(ds) > 0 {
				t.Fatalf("round %d: %d deliveries, error %v; want the context's error", i, len(ds), err)
			}
			continue
		}
		for _, d := range ds {
			taken++
			if err := b.Release(ctx, d, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "l", Max: 1, Lease: time.Minute})
	if err != nil || len(ds) != 1 || ds[0].ID != m.ID || ds[0].Attempt != 1 {
		t.Fatalf("after the rounds (%d took it): %+v, %v; want the message at attempt 1", taken, ds, err)
	}
}
