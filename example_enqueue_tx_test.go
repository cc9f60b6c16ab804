package switchyard_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Enqueue inside your own transaction: the task exists if and only if the
// transaction commits. Here the application's table and the SQLite ledger
// share one database file.
func ExampleClient_EnqueueTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example-tx")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "app.db")
	L, _ := ledger.Open(ctx, "sqlite://"+path)
	defer L.Close()
	db, _ := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(5000)")
	defer db.Close()
	db.Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY)`)
	b, _ := broker.Open(ctx, "mem://example-tx", nil)
	defer b.Close()
	client, _ := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	defer client.Close(ctx)

	// Committed: the order and its confirmation task.
	tx, _ := db.Begin()
	tx.Exec(`INSERT INTO orders (id) VALUES (1)`)
	kept, _ := client.EnqueueTx(ctx, tx, greetArgs{Name: "order 1"}, nil)
	tx.Commit()

	// Rolled back: neither.
	tx, _ = db.Begin()
	tx.Exec(`INSERT INTO orders (id) VALUES (2)`)
	gone, _ := client.EnqueueTx(ctx, tx, greetArgs{Name: "order 2"}, nil)
	tx.Rollback()

	_, err := L.Get(ctx, kept.ID)
	fmt.Println("committed task recorded:", err == nil)
	_, err = L.Get(ctx, gone.ID)
	fmt.Println("rolled-back task recorded:", err == nil)

	// A transaction that is already over is refused.
	_, err = client.EnqueueTx(ctx, tx, greetArgs{Name: "late"}, nil)
	fmt.Println("closed transaction refused:", err != nil)
	// Output:
	// committed task recorded: true
	// rolled-back task recorded: false
	// closed transaction refused: true
}
