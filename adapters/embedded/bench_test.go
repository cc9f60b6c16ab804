package embedded_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/benchkit"
)

// Benchmarks of the durable embedded broker with 1 KiB messages, batches of
// 100, two consumers. Each reports msgs/s; b.N counts messages.
//
//	go test ./adapters/embedded/ -run '^$' -bench . -benchtime 20000x -count 3

func openBench(b *testing.B) *broker.Broker {
	b.Helper()
	br, err := broker.Open(context.Background(), "embedded://"+filepath.Join(b.TempDir(), "bench.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	return br
}

func BenchmarkPublish(b *testing.B) {
	br := openBench(b)
	b.ResetTimer()
	r, err := benchkit.Publish(context.Background(), br, "batch", b.N, 1024, 100)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.PerSecond(), "msgs/s")
}

func BenchmarkEndToEnd(b *testing.B) {
	br := openBench(b)
	b.ResetTimer()
	r, err := benchkit.EndToEnd(context.Background(), br, "batch", b.N, 1024, 100, 2)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.PerSecond(), "msgs/s")
}

// BenchmarkRawSQLite is the ceiling: the same work as a plain batched
// SQLite loop on the same driver and pragmas (insert 100 in a transaction,
// lease 100 with one UPDATE … RETURNING, delete 100), with no framework.
func BenchmarkRawSQLite(b *testing.B) {
	path := filepath.Join(b.TempDir(), "raw.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE q (seq INTEGER PRIMARY KEY AUTOINCREMENT, body BLOB, visible_at INTEGER NOT NULL, token INTEGER NOT NULL DEFAULT 0)`); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`CREATE INDEX q_ready ON q (visible_at, seq)`); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for done := 0; done < b.N; done += 100 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		st, _ := tx.Prepare(`INSERT INTO q (body, visible_at) VALUES (?, ?)`)
		now := time.Now().UnixNano()
		for i := 0; i < 100; i++ {
			if _, err := st.Exec(body, now); err != nil {
				b.Fatal(err)
			}
		}
		st.Close()
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		rows, err := db.Query(`UPDATE q SET token = ?, visible_at = ? WHERE seq IN (SELECT seq FROM q WHERE visible_at <= ? ORDER BY visible_at, seq LIMIT 100) RETURNING seq, body`,
			now, now+int64(time.Minute), time.Now().UnixNano())
		if err != nil {
			b.Fatal(err)
		}
		var seqs []int64
		for rows.Next() {
			var s int64
			var bb []byte
			if err := rows.Scan(&s, &bb); err != nil {
				b.Fatal(err)
			}
			seqs = append(seqs, s)
		}
		rows.Close()
		tx, _ = db.BeginTx(ctx, nil)
		del, _ := tx.Prepare(`DELETE FROM q WHERE seq = ? AND token = ?`)
		for _, s := range seqs {
			if _, err := del.Exec(s, now); err != nil {
				b.Fatal(err)
			}
		}
		del.Close()
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkSequential does exactly the raw loop's work through Switchyard:
// publish 100, receive 100, ack 100, one goroutine, so the two compare
// like for like (the table never holds more than one batch).
func BenchmarkSequential(b *testing.B) {
	br := openBench(b)
	ctx := context.Background()
	body := make([]byte, 1024)
	msgs := make([]*broker.Message, 100)
	b.ResetTimer()
	start := time.Now()
	for done := 0; done < b.N; done += 100 {
		for i := range msgs {
			msgs[i] = &broker.Message{Lane: "batch", Kind: "bench.noop", Body: body}
		}
		if _, err := br.Publish(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
		ds, err := br.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 100, Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if err := br.Ack(ctx, ds...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
