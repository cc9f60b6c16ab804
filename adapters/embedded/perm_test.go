package embedded_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
)

// TestOpen_FileModes: a new database's directory is 0700 and its database,
// -wal and -shm files 0600; an existing one others can read is reported,
// not changed.
func TestOpen_FileModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "q.db")
	d, err := embedded.OpenConfig(ctx, &embedded.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Publish(ctx, []*broker.Message{{ID: "m1", Lane: "batch", Kind: "k", Body: []byte("x")}}); err != nil {
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
	d.Close()

	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	d, err = embedded.OpenConfig(ctx, &embedded.Config{Path: path, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !strings.Contains(logs.String(), "path="+path+" ") || !strings.Contains(logs.String(), "mode=0640") {
		t.Errorf("no warning about the 0640 database:\n%s", logs.String())
	}
}
