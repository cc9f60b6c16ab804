package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

var fuzzMem atomic.Int64

// FuzzRow: a row of the messages table with any content (a tampered
// database, an older or newer version's row) never makes Receive panic or
// fail: a live row is delivered with its headers, or dead-lettered with a
// reason; a dead row is listed with a dead-letter reason. Nothing is lost.
func FuzzRow(f *testing.F) {
	hdr, _ := json.Marshal(map[string]string{"traceparent": "00-1", "meta-x": "y"})
	dl, _ := broker.EncodeDeadLetter(&broker.DeadLetter{Reason: broker.ReasonMaxAttempts, Error: "e"})
	f.Add("01a2", "email.send", []byte(`{"to":"a"}`), hdr, "acme", "k", "o", int64(1700000000000000000), int64(1700000000000000000), int64(5), int64(0), []byte(nil), false)
	f.Add("", "", []byte("garbage"), []byte("garbage"), "", "", "", int64(0), int64(0), int64(0), int64(0), []byte(nil), false)
	f.Add("x", "k", []byte{}, []byte(`{"a":1}`), "", "", "", int64(-1), int64(math.MinInt64), int64(-5), int64(math.MaxInt64), []byte(nil), false)
	f.Add("x", "k", []byte{}, []byte(`null`), "", "", "o", int64(math.MaxInt64), int64(0), int64(math.MaxInt64), int64(3), dl, true)
	f.Add("x", "bad kind", []byte{}, []byte{}, "", "", "", int64(0), int64(0), int64(0), int64(0), []byte(`{}`), true)
	d, err := Open(context.Background(), Config{Memory: true, MemoryName: "fuzzrow" + strings.Repeat("x", int(fuzzMem.Add(1)))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { d.Close() })
	f.Fuzz(func(t *testing.T, id, kind string, body, headers []byte, tenant, idem, ord string, runAt, enq, maxAtt, attempts int64, deadLetter []byte, dead bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const lane = "fz"
		laneID, _, err := d.laneID(ctx, lane, true)
		if err != nil {
			t.Fatal(err)
		}
		res, err := d.db.ExecContext(ctx, `INSERT INTO sy_messages (lane_id, dead, id, kind, body, headers, tenant, idem_key, ord_key,
			run_at, enqueued_at, max_attempts, visible_at, attempts, dead_letter) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)`,
			laneID, dead, id, kind, body, headers, tenant, idem, ord, runAt, enq, maxAtt, attempts, deadLetter)
		if err != nil {
			t.Skip("SQLite refused the row:", err)
		}
		seq, _ := res.LastInsertId()
		defer d.db.Exec(`DELETE FROM sy_messages WHERE seq = ?`, seq)
		ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 10, Lease: time.Minute})
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		if !dead && len(ds) == 1 {
			dv := ds[0]
			if dv.ID != id || dv.Kind != kind || broker.ValidateName("kind", dv.Kind) != nil {
				t.Fatalf("delivered %+v from a row with id %q kind %q", dv, id, kind)
			}
			var want map[string]string
			if len(headers) > 0 {
				_ = json.Unmarshal(headers, &want)
			}
			if len(want) != len(dv.Headers) {
				t.Fatalf("headers %q delivered as %v", headers, dv.Headers)
			}
			return
		}
		if len(ds) != 0 {
			t.Fatalf("Receive gave %d deliveries for a dead row", len(ds))
		}
		dead2, err := d.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 10, Lease: time.Minute, DeadLetters: true})
		if err != nil {
			t.Fatalf("Receive dead letters: %v", err)
		}
		if len(dead2) != 1 || dead2[0].DeadLetter == nil || dead2[0].DeadLetter.Reason == "" {
			t.Fatalf("the row (dead %v) is neither delivered nor a dead letter with a reason: %+v", dead, dead2)
		}
	})
}

// FuzzOpenURL: no embedded:// or mem:// URL makes the opener panic, and
// refusals are broker.ErrInvalid. Files go under a temporary directory.
func FuzzOpenURL(f *testing.F) {
	for _, s := range []string{"q.db", "q.db?namespace=n&poll=10ms", "q.db?max_message_size=0", "q.db?namespace=bad%20ns",
		"q.db?bogus=1", "b%23c.db", "a%00b.db", "dir/q.db", "q.db?sync_full=maybe", "q.db?dedup_window=-1s"} {
		f.Add(false, s)
	}
	f.Add(true, "fz?namespace=n")
	f.Add(true, "fz/path")
	f.Fuzz(func(t *testing.T, mem bool, rest string) {
		raw := "mem://" + rest
		if !mem {
			raw = "embedded://" + filepath.ToSlash(t.TempDir()) + "/" + rest
		}
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		if !mem {
			p := u.Host + u.Path
			if strings.Contains(p, "..") || !strings.HasPrefix(filepath.Clean(p), filepath.Clean(strings.TrimSuffix(raw[len("embedded://"):], rest))) {
				return // outside the temporary directory
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d, err := openURL(ctx, u)
		var be *broker.Error
		switch {
		case err == nil:
		case !mem && strings.ContainsFunc(u.Host+u.Path, func(r rune) bool { return r < 0x20 || r == 0x7f }) && !errors.Is(err, broker.ErrInvalid):
			// ?, # and % are escaped for SQLite's URI; NUL and control
			// characters are refused.
			t.Fatalf("openURL(%q) = %v, want ErrInvalid for a path with a NUL or control character", raw, err)
		case !errors.As(err, &be):
			// The file system may refuse a name (too long, say): a
			// classified error, not necessarily ErrInvalid.
			t.Fatalf("openURL(%q) = %v, not a classified broker error", raw, err)
		}
		if err != nil {
			return
		}
		d.Close()
	})
}
