package sqlite_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
)

// TestOpen_FileModes: a new ledger's database, -wal and -shm files are
// 0600; an existing database others can read is reported, not changed.
func TestOpen_FileModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "ledger.db")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := openFile(t, path, nil)
	if _, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch", Args: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{dir: 0o700, path: 0o600, path + "-wal": 0o600, path + "-shm": 0o600}
	for p, m := range want {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if got := fi.Mode().Perm(); got != m {
			t.Errorf("%s: mode %#o, want %#o", filepath.Base(p), got, m)
		}
	}
	s.Close()

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	openFile(t, path, &sqlite.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !strings.Contains(logs.String(), "path="+path+" ") || !strings.Contains(logs.String(), "mode=0644") {
		t.Errorf("no warning about the 0644 database:\n%s", logs.String())
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("an existing file's mode was changed to %#o", fi.Mode().Perm())
	}
}
