// Package fileperm creates the database files of the embedded broker and
// the SQLite ledger readable by their owner only, and warns about existing
// ones that others can read.
//
// A new directory is created 0700 and a new database file 0600, whatever
// the process's umask (the mode is set with chmod after creation). SQLite
// gives the -wal and -shm files it creates next to a database the
// database file's own mode (and fixes it with fchmod, umask or not), so a
// database created here keeps its side files private too. Existing files
// and directories are never changed: an operator may have opened them on
// purpose. Prepare logs a warning for a database or side file that group
// or others can read or write, and for a directory that group or others
// can write (they could swap the files or plant a -wal file before SQLite
// creates it). A directory others can merely list (0755, the usual mode
// of /var/lib/app) shows file names only and is not reported.
package fileperm

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// Modes of what Prepare creates.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// sideFiles are the files SQLite keeps next to a database in WAL mode.
var sideFiles = []string{"-wal", "-shm", "-journal"}

// Prepare makes sure path exists (creating it empty, 0600, when missing),
// with mkdir, also its directory (creating missing directories 0700;
// without mkdir a missing directory is an error), and warns through logger
// (slog.Default() when nil) about an existing directory, database file or
// side file whose mode lets group or others in. what names the file in the
// warning ("ledger", "embedded broker").
func Prepare(path, what string, mkdir bool, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	dir := filepath.Dir(path)
	if mkdir {
		if err := mkdirAll(dir); err != nil {
			return fmt.Errorf("create directory %s: %w", dir, err)
		}
	}
	warnWide(logger, what, dir)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, FileMode)
	switch {
	case err == nil:
		// New: set the mode exactly, whatever the umask took away or not.
		cerr := f.Chmod(FileMode)
		if err := f.Close(); err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		if cerr != nil {
			return fmt.Errorf("create %s: %w", path, cerr)
		}
	case errors.Is(err, fs.ErrExist):
		warnWide(logger, what, path)
	default:
		return fmt.Errorf("create %s: %w", path, err)
	}
	for _, s := range sideFiles {
		if _, err := os.Lstat(path + s); err == nil {
			warnWide(logger, what, path+s)
		}
	}
	return nil
}

// mkdirAll is os.MkdirAll with DirMode set exactly on every directory it
// creates (MkdirAll's mode is filtered by the umask).
func mkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, DirMode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // created meanwhile by someone else
		}
		return err
	}
	return os.Chmod(dir, DirMode)
}

// Wide reports whether fi is open to group or others as Prepare reports
// it: a file they can read or write, a directory they can write.
func Wide(fi fs.FileInfo) bool {
	if fi.IsDir() {
		return fi.Mode().Perm()&0o022 != 0
	}
	return fi.Mode().Perm()&0o066 != 0
}

func warnWide(logger *slog.Logger, what, path string) {
	fi, err := os.Stat(path)
	if err != nil || !Wide(fi) {
		return
	}
	want := FileMode
	if fi.IsDir() {
		want = DirMode
	}
	msg := "switchyard: the " + what + " database file is open to group or others; it holds task data: restrict it (chmod)"
	if fi.IsDir() {
		msg = "switchyard: the directory of the " + what + " database is writable by group or others: restrict it (chmod)"
	}
	logger.Warn(msg,
		"path", path, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()), "want", fmt.Sprintf("%#o", want))
}
