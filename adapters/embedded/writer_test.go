package embedded

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// testWriter is a writer on a database of its own with a table whose
// foreign key is checked at commit, so a test can make a commit fail.
func testWriter(t *testing.T) (*writer, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "w.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		`CREATE TABLE parent (id INTEGER PRIMARY KEY)`,
		`CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)`,
		`INSERT INTO parent (id) VALUES (1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	s := &sharedDB{db: db, stmts: map[string]*sql.Stmt{}}
	for _, q := range []string{savepointSQL, releaseSQL, rollbackSQL} {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		s.stmts[q] = st
	}
	s.w = &writer{s: s}
	return s.w, db
}

func insertChild(id, parent int) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO child (id, parent) VALUES (?, ?)`, id, parent)
		return err
	}
}

// hold keeps w busy until the returned release is called, so that the
// operations started meanwhile queue up and then run as one group.
func hold(t *testing.T, w *writer) (release func()) {
	t.Helper()
	started, gate := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- w.do(context.Background(), func(context.Context, *sql.Tx) error {
			close(started)
			<-gate
			return nil
		})
	}()
	<-started
	return func() {
		close(gate)
		if err := <-done; err != nil {
			t.Errorf("holding operation: %v", err)
		}
	}
}

// waitQueued waits until n operations are queued behind the one in flight.
func waitQueued(t *testing.T, w *writer, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		w.mu.Lock()
		q := len(w.queue)
		w.mu.Unlock()
		if q == n {
			return
		}
	}
	t.Fatalf("%d operations never queued", n)
}

// group runs fns concurrently behind a held writer, so they share one
// transaction, and returns their errors in order.
func group(t *testing.T, w *writer, ctxs []context.Context, fns ...func(context.Context, *sql.Tx) error) []error {
	t.Helper()
	release := hold(t, w)
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		ctx := context.Background()
		if ctxs != nil && ctxs[i] != nil {
			ctx = ctxs[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.do(ctx, fn)
		}()
		waitQueued(t, w, i+1) // keeps the arrival order
	}
	release()
	wg.Wait()
	return errs
}

func children(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM child`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWriter_GroupSharesOneCommit(t *testing.T) {
	w, db := testWriter(t)
	errs := group(t, w, nil, insertChild(1, 1), insertChild(2, 1), insertChild(3, 1))
	for i, err := range errs {
		if err != nil {
			t.Errorf("op %d: %v", i, err)
		}
	}
	if n := children(t, db); n != 3 {
		t.Errorf("%d rows committed, want 3", n)
	}
}

// A failing commit fails every operation of its group, not only the one
// that caused it, and none of them is committed.
func TestWriter_FailedCommitFailsEveryOp(t *testing.T) {
	w, db := testWriter(t)
	errs := group(t, w, nil, insertChild(1, 1), insertChild(2, 99), insertChild(3, 1))
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "FOREIGN KEY") {
			t.Errorf("op %d: error %v, want the failed commit's", i, err)
		}
	}
	if n := children(t, db); n != 0 {
		t.Errorf("%d rows committed after a failed commit", n)
	}
}

// An operation's own error is its alone: its writes are rolled back to its
// savepoint and the others commit.
func TestWriter_OpErrorIsItsOwn(t *testing.T) {
	w, db := testWriter(t)
	boom := errors.New("boom")
	errs := group(t, w, nil, insertChild(1, 1), func(ctx context.Context, tx *sql.Tx) error {
		if err := insertChild(2, 1)(ctx, tx); err != nil {
			return err
		}
		return boom
	}, func(context.Context, *sql.Tx) error { panic("driver bug") }, insertChild(3, 1))
	if errs[0] != nil || errs[3] != nil {
		t.Errorf("the others failed: %v, %v", errs[0], errs[3])
	}
	if !errors.Is(errs[1], boom) {
		t.Errorf("failing op: %v, want its own error", errs[1])
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "panicked") {
		t.Errorf("panicking op: %v", errs[2])
	}
	var ids []int
	rows, err := db.Query(`SELECT id FROM child ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	if len(ids) != 2 || ids[0] != 1 || ids[1] != 3 {
		t.Errorf("committed %v, want [1 3]", ids)
	}
}

// A caller that gives up while queued returns its context's error at once,
// and its operation never runs; the rest of the group commits.
func TestWriter_CancelWhileQueued(t *testing.T) {
	w, db := testWriter(t)
	release := hold(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{}, 1)
	got := make(chan error, 1)
	go func() {
		got <- w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
			ran <- struct{}{}
			return insertChild(1, 1)(ctx, tx)
		})
	}()
	waitQueued(t, w, 1)
	other := make(chan error, 1)
	go func() { other <- w.do(context.Background(), insertChild(2, 1)) }()
	waitQueued(t, w, 2)
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled caller: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled caller kept waiting for the transaction in flight")
	}
	release()
	if err := <-other; err != nil {
		t.Errorf("the other caller: %v", err)
	}
	select {
	case <-ran:
		t.Error("a cancelled operation ran")
	default:
	}
	if n := children(t, db); n != 1 {
		t.Errorf("%d rows committed, want 1", n)
	}
}

// Close while operations wait for their turn: each returns an error (the
// driver is closed), none hangs and none reports success.
func TestWriter_CloseDuringPendingGroup(t *testing.T) {
	ctx := context.Background()
	d, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "q.db")})
	if err != nil {
		t.Fatal(err)
	}
	// The lane's id is written (and cached) first: a publish on a new lane
	// writes it in a transaction of its own before queueing its messages.
	if _, err := d.Publish(ctx, []*broker.Message{{ID: broker.NewID(), Lane: "batch", Kind: "k", Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	w := d.shared.w
	release := hold(t, w)
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := d.Publish(ctx, []*broker.Message{{ID: broker.NewID(), Lane: "batch", Kind: "k", Body: []byte("x")}})
			errs <- err
		}()
		waitQueued(t, w, i+1)
	}
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	for !d.closed.Load() {
		time.Sleep(time.Millisecond)
	}
	release()
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, broker.ErrClosed) {
				t.Errorf("publish during close: %v, want ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a publish queued during Close hung")
		}
	}
	if err := <-closed; err != nil {
		t.Errorf("close: %v", err)
	}
}

// One caller's context ending while its group runs ends neither the
// transaction nor the others' operations.
func TestWriter_OneCallerCancelledInGroup(t *testing.T) {
	w, db := testWriter(t)
	ctx, cancel := context.WithCancel(context.Background())
	slow := func(ctx context.Context, tx *sql.Tx) error {
		cancel() // the second caller gives up while the group runs
		return insertChild(1, 1)(ctx, tx)
	}
	errs := group(t, w, []context.Context{nil, ctx, nil}, slow, insertChild(2, 1), insertChild(3, 1))
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("the others failed: %v, %v", errs[0], errs[2])
	}
	// The second caller's operation may have been skipped (cancelled
	// before its turn) or committed; either way its caller is told which.
	n := children(t, db)
	switch {
	case errs[1] == nil && n != 3, errs[1] != nil && n != 2:
		t.Errorf("cancelled caller got %v with %d rows committed", errs[1], n)
	}
}
