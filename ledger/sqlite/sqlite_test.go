package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/ledgertest"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
)

func openFile(t *testing.T, path string, o *sqlite.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, o)
	if err != nil {
		t.Fatalf("Open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance_File(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger {
		return openFile(t, filepath.Join(t.TempDir(), "ledger.db"), nil)
	})
}

func TestConformance_Memory(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger {
		return openFile(t, sqlite.Memory, nil)
	})
}

func TestOpen_DSN(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	abs := filepath.Join(dir, "abs.db")
	l, err := ledger.Open(ctx, "sqlite://"+abs+"?busy_timeout=2s&synchronous=normal&readers=2&dedup_window=1h")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.(*sqlite.Store).Path(); got != abs {
		t.Errorf("path %q, want %q", got, abs)
	}
	l.Close()
	if _, err := os.Stat(abs); err != nil {
		t.Errorf("sqlite:///abs did not create %s: %v", abs, err)
	}
	// Relative form, from the working directory.
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, filepath.Join(dir, "rel.db"))
	if err != nil {
		t.Fatal(err)
	}
	l, err = ledger.Open(ctx, "sqlite:"+rel)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := os.Stat(filepath.Join(dir, "rel.db")); err != nil {
		t.Errorf("sqlite:relative did not create the file: %v", err)
	}
	l, err = ledger.Open(ctx, "sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	if l.(*sqlite.Store).Path() != sqlite.Memory {
		t.Errorf("sqlite::memory: opened %q", l.(*sqlite.Store).Path())
	}
	l.Close()
	for _, bad := range []string{
		"sqlite://" + abs + "?bogus=1",
		"sqlite://" + abs + "?busy_timeout=soon",
		"sqlite://" + abs + "?synchronous=off",
		"sqlite://" + abs + "?readers=0",
		"sqlite://" + abs + "?dedup_window=0s",
		"sqlite://host/x.db",
		"sqlite://user:hunter2@host/x.db",
		"sqlite://",
		"nosuch:///x",
		"no-scheme",
		"%zz",
	} {
		_, err := ledger.Open(ctx, bad)
		if !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("Open(%q): %v, want ErrInvalid", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q) leaked the password: %v", bad, err)
		}
	}
}

func TestOpen_NotSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte("this is certainly not a database, just some text that is long enough"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := sqlite.Open(context.Background(), junk, nil)
	if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "not a SQLite database") {
		t.Fatalf("Open of a text file: %v", err)
	}
	// A SQLite header followed by garbage: SQLite itself refuses it.
	bad := filepath.Join(dir, "corrupt.db")
	page := make([]byte, 8192)
	copy(page, "SQLite format 3\x00")
	for i := 16; i < len(page); i++ {
		page[i] = byte(i * 7)
	}
	if err := os.WriteFile(bad, page, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = sqlite.Open(context.Background(), bad, nil)
	if err == nil || !errors.Is(err, broker.ErrPermanent) {
		t.Fatalf("Open of a corrupt file: %v, want a permanent error", err)
	}
	_, err = sqlite.Open(context.Background(), filepath.Join(dir, "no", "such", "dir", "x.db"), nil)
	if err == nil || !errors.Is(err, broker.ErrPermanent) {
		t.Fatalf("Open in a missing directory: %v, want a permanent error", err)
	}
}

func TestOpen_Migrations(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := context.Background()
	s := openFile(t, path, nil)
	v, err := s.SchemaVersion(ctx)
	if err != nil || v < 1 {
		t.Fatalf("schema version %d %v", v, err)
	}
	task, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch", IdempotencyKey: "persist"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Reopening applies nothing twice and keeps the data.
	s2 := openFile(t, path, nil)
	if v2, _ := s2.SchemaVersion(ctx); v2 != v {
		t.Errorf("schema version changed on reopen: %d → %d", v, v2)
	}
	got, err := s2.GetByKey(ctx, "", "persist")
	if err != nil || got.ID != task.ID {
		t.Fatalf("task after reopen: %v %v", got, err)
	}
	s2.Close()
	// A database from a newer program is refused.
	raw := openFile(t, path, nil)
	_ = raw
	raw.Close()
	if err := bumpVersion(path); err != nil {
		t.Fatal(err)
	}
	_, err = sqlite.Open(ctx, path, nil)
	if err == nil || !strings.Contains(err.Error(), "newer than this program") {
		t.Fatalf("Open of a newer schema: %v", err)
	}
}

// TestDedup_Window: claims expire after the window and can be re-claimed;
// Prune forgets expired claims.
func TestDedup_Window(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	s := openFile(t, filepath.Join(t.TempDir(), "ledger.db"), &sqlite.Options{DedupWindow: time.Minute, Now: clock})
	ctx := context.Background()
	if _, dup, err := s.Claim(ctx, "batch", "acme", "k", "id-1"); err != nil || dup {
		t.Fatalf("first claim: %v %v", dup, err)
	}
	now.Add(int64(59 * time.Second))
	if existing, dup, err := s.Claim(ctx, "batch", "acme", "k", "id-2"); err != nil || !dup || existing != "id-1" {
		t.Fatalf("claim inside the window: %q %v %v", existing, dup, err)
	}
	now.Add(int64(2 * time.Second))
	if _, dup, err := s.Claim(ctx, "batch", "acme", "k", "id-3"); err != nil || dup {
		t.Fatalf("claim after the window: dup=%v %v", dup, err)
	}
	if existing, dup, err := s.Claim(ctx, "batch", "acme", "k", "id-4"); err != nil || !dup || existing != "id-3" {
		t.Fatalf("claim after re-claim: %q %v %v", existing, dup, err)
	}
	now.Add(int64(2 * time.Minute))
	if _, err := s.Prune(ctx, clock()); err != nil {
		t.Fatal(err)
	}
	if _, dup, err := s.Claim(ctx, "batch", "acme", "k", "id-5"); err != nil || dup {
		t.Fatalf("claim after prune: dup=%v %v", dup, err)
	}
}

// TestTwoProcesses: two stores on one file (as two processes would open
// it) race on one idempotency key and one transition; the file's locking
// and the busy timeout keep exactly-one semantics.
func TestTwoProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	a := openFile(t, path, nil)
	b := openFile(t, path, nil)
	ctx := context.Background()
	var created atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			_, ok, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch", IdempotencyKey: "shared"})
			if err != nil {
				errs <- err
			}
			if ok {
				created.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if created.Load() != 1 {
		t.Fatalf("two stores created %d tasks for one key", created.Load())
	}
}

// bumpVersion records a schema version far beyond this program's.
func bumpVersion(path string) error {
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(`INSERT INTO ledger_schema_version (version, name, applied_at) VALUES (9999, 'future', 0)`)
	return err
}

// TestGroupCommit_Failures: writes that fail inside a group commit roll
// back alone; the others in the same transaction are kept.
func TestGroupCommit_Failures(t *testing.T) {
	t.Parallel()
	s := openFile(t, filepath.Join(t.TempDir(), "ledger.db"), nil)
	ctx := context.Background()
	task, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i % 3 {
			case 0:
				_, errs[i] = s.PutStep(ctx, task.ID, fmt.Sprint("step-", i), []byte("x"))
			case 1:
				_, errs[i] = s.PutStep(ctx, "no-such-task", fmt.Sprint("step-", i), []byte("x"))
			case 2:
				errs[i] = s.AppendEvent(ctx, ledger.Event{TaskID: task.ID, Reason: "note"})
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i%3 == 1 {
			if !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("write %d to an unknown task: %v, want ErrNotFound", i, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	for i := 0; i < n; i += 3 {
		if _, ok, err := s.GetStep(ctx, task.ID, fmt.Sprint("step-", i)); err != nil || !ok {
			t.Errorf("step-%d lost: %v %v", i, ok, err)
		}
	}
	evs, err := s.Events(ctx, task.ID)
	if err != nil || len(evs) != 1+n/3 {
		t.Errorf("%d events, want %d (%v)", len(evs), 1+n/3, err)
	}
	txns, writes := sqlite.GroupStats(s)
	t.Logf("%d writes in %d transactions", writes, txns)
}
