package fileperm_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/fileperm"
)

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestPrepare_NewIgnoresUmask: with a permissive umask, new directories are
// still 0700 and the new file 0600, and nothing is logged.
func TestPrepare_NewIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	root := t.TempDir()
	p := filepath.Join(root, "a", "b", "x.db")
	var logs bytes.Buffer
	if err := fileperm.Prepare(p, "ledger", true, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(root, "a"), filepath.Join(root, "a", "b")} {
		if m := mode(t, d); m != 0o700 {
			t.Errorf("%s: mode %#o, want 0700", d, m)
		}
	}
	if m := mode(t, p); m != 0o600 {
		t.Errorf("file mode %#o, want 0600", m)
	}
	if logs.Len() != 0 {
		t.Errorf("unexpected warnings: %s", logs.String())
	}
}

// TestPrepare_WarnsAboutWideExisting: existing wide files are left alone
// and reported, each one.
func TestPrepare_WarnsAboutWideExisting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o775)
	p := filepath.Join(dir, "x.db")
	for _, f := range []string{p, p + "-wal"} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(f, 0o644)
	}
	var logs bytes.Buffer
	if err := fileperm.Prepare(p, "ledger", true, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 3 {
		t.Errorf("%d warnings, want 3 (directory, file, -wal):\n%s", n, out)
	}
	for _, w := range []string{"path=" + dir + " ", "path=" + p + " ", "path=" + p + "-wal "} {
		if !strings.Contains(out, w) {
			t.Errorf("no warning for %s:\n%s", w, out)
		}
	}
	if m := mode(t, p); m != 0o644 {
		t.Errorf("existing file's mode changed to %#o", m)
	}
}

// TestPrepare_ListableDirectory: a 0755 directory (names visible, files
// private) is not reported; without mkdir a missing directory is an error.
func TestPrepare_ListableDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	os.Mkdir(dir, 0o755)
	os.Chmod(dir, 0o755)
	var logs bytes.Buffer
	if err := fileperm.Prepare(filepath.Join(dir, "x.db"), "ledger", false, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	if logs.Len() != 0 {
		t.Errorf("unexpected warnings: %s", logs.String())
	}
	if err := fileperm.Prepare(filepath.Join(dir, "missing", "x.db"), "ledger", false, nil); err == nil {
		t.Error("no error for a missing directory without mkdir")
	}
}

func TestPrepare_NotADirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	os.WriteFile(f, nil, 0o600)
	if err := fileperm.Prepare(filepath.Join(f, "x.db"), "ledger", true, nil); err == nil {
		t.Fatal("no error for a path under a file")
	}
}
