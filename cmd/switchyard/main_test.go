package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCLI_Usage(t *testing.T) {
	if code, _, errs := runCLI(t); code != 2 || !strings.Contains(errs, "usage") {
		t.Errorf("no args: code %d, stderr %q", code, errs)
	}
	if code, _, errs := runCLI(t, "frobnicate"); code != 2 || !strings.Contains(errs, "unknown command") {
		t.Errorf("unknown command: code %d, stderr %q", code, errs)
	}
}

func TestCLI_Stats(t *testing.T) {
	dir := t.TempDir()
	url := "embedded://" + filepath.Join(dir, "q.db")
	ctx := context.Background()
	b, err := broker.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, &broker.Message{Lane: "batch", Kind: "k"}, &broker.Message{Lane: "custom-lane", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	code, out, errs := runCLI(t, "stats", "--broker", url)
	if code != 0 || !strings.Contains(out, "custom-lane") || !strings.Contains(out, "interactive") {
		t.Fatalf("stats: code %d\n%s%s", code, out, errs)
	}
	code, out, _ = runCLI(t, "stats", "--broker", url, "--json", "--lanes", "batch")
	var rows []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0]["ready"].(float64) != 1 {
		t.Fatalf("stats --json: code %d, %q", code, out)
	}
	for _, bad := range [][]string{
		{"stats"},
		{"stats", "--broker", "nosuch://x"},
		{"stats", "--broker", url + "?bogus=1"},
		{"stats", "--broker", url, "--lanes", "bad lane"},
	} {
		if code, _, _ := runCLI(t, bad...); code == 0 {
			t.Errorf("%v succeeded", bad)
		}
	}
}

func TestCLI_ReviewBadInput(t *testing.T) {
	dir := t.TempDir()
	url := "embedded://" + filepath.Join(dir, "q.db")
	dsn := "sqlite://" + filepath.Join(dir, "l.db")
	if code, _, errs := runCLI(t, "review", "ls", "--broker", url, "--ledger", dsn, "--json"); code != 1 || !strings.Contains(errs, "no such database: "+filepath.Join(dir, "l.db")) {
		t.Fatalf("review ls on a ledger that does not exist: code %d, %q; want no such database", code, errs)
	}
	code, out, _ := runCLI(t, "review", "ls", "--broker", url, "--ledger", dsn, "--json", "--create")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty review ls: code %d, %q", code, out)
	}
	if code, _, errs := runCLI(t, "review", "approve", "no-such-task", "--broker", url, "--ledger", dsn, "--reviewer", "a"); code != 1 || !strings.Contains(errs, "not found") {
		t.Errorf("approve unknown id: code %d, %q", code, errs)
	}
	if code, _, _ := runCLI(t, "review", "reject", "x", "--broker", url, "--ledger", dsn); code == 0 {
		t.Error("reject without reviewer succeeded")
	}
	if code, _, _ := runCLI(t, "review", "frob", "--broker", url, "--ledger", dsn); code != 2 {
		t.Error("unknown review subcommand accepted")
	}
}

func TestCLI_Demo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes a few seconds; -short skips it")
	}
	code, out, errs := runCLI(t, "demo", "--docs", "6", "--interactive", "2", "--quiet", "--seed", "7")
	if code != 0 || !strings.Contains(out, "0 written twice") || !strings.Contains(out, "permanent_error") {
		t.Fatalf("demo: code %d\n%s\n%s", code, out, errs)
	}
}

func TestCLI_Migrate(t *testing.T) {
	dir := t.TempDir()
	from := "embedded://" + filepath.Join(dir, "a.db") + "?namespace=app"
	to := "embedded://" + filepath.Join(dir, "b.db") + "?namespace=app"
	ctx := context.Background()
	b, err := broker.Open(ctx, from, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", IdempotencyKey: fmt.Sprint("key-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	code, out, errs := runCLI(t, "migrate", "--from", from, "--to", to, "--dry-run", "--lanes", "batch")
	if code != 0 || !strings.Contains(out, "WOULD MOVE") {
		t.Fatalf("dry run: code %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "migrate", "--from", from, "--to", to, "--lanes", "batch", "--yes", "--state-dir", dir)
	if code != 0 || !strings.Contains(out, "moved 5") {
		t.Fatalf("migrate: code %d\n%s%s", code, out, errs)
	}
	for _, bad := range [][]string{
		{"migrate", "--from", from},
		{"migrate", "--from", from, "--to", from, "--yes"},
		{"migrate", "--from", from, "--to", "embedded://" + filepath.Join(dir, "c.db") + "?namespace=other", "--yes"},
		{"migrate", "--from", from, "--to", "nosuch://x", "--yes"},
	} {
		if code, _, _ := runCLI(t, bad...); code == 0 {
			t.Errorf("%v succeeded", bad)
		}
	}
}

// TestCLI_MigrateLedgerReleasesSourceNumbers: with --ledger, keyed
// messages moved between two brokers without native ordering (the
// embedded broker reduced stands for RabbitMQ, NATS or SQS standard) are
// numbered again by the ledger, and their old numbers, from the same
// ledger, are released: the key's first copy may start at once instead of
// waiting for the old numbers to be skipped as lost.
func TestCLI_MigrateLedgerReleasesSourceNumbers(t *testing.T) {
	dir := t.TempDir()
	from := "embedded://" + filepath.Join(dir, "a.db") + "?reduced=true&namespace=app"
	to := "embedded://" + filepath.Join(dir, "b.db") + "?reduced=true&namespace=app"
	dsn := "sqlite://" + filepath.Join(dir, "ledger.db")
	ctx := context.Background()
	L, err := ledger.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()
	sq := ledger.SequencerOf(L)
	b, err := broker.Open(ctx, from, &broker.Options{Sequencer: sq})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", OrderingKey: "key", Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	code, out, errs := runCLI(t, "migrate", "--from", from, "--to", to, "--lanes", "batch", "--yes", "--state-dir", dir, "--ledger", dsn)
	if code != 0 || !strings.Contains(out, "moved 3") {
		t.Fatalf("migrate: code %d\n%s%s", code, out, errs)
	}
	drv, err := broker.OpenDriver(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	ds, err := drv.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute, Wait: time.Second})
	if err != nil || len(ds) != 3 {
		t.Fatalf("the target holds %d messages (%v), want 3", len(ds), err)
	}
	first := int64(0)
	for _, d := range ds {
		seq, err := strconv.ParseInt(d.Headers[broker.HeaderOrderSeq], 10, 64)
		if err != nil {
			t.Fatalf("copy %s carries no ordering number: %v", d.ID, d.Headers)
		}
		if first == 0 || seq < first {
			first = seq
		}
	}
	g, ahead, err := sq.(broker.SequencerPosition).AcquirePosition(ctx, "batch", "key", first, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if g != broker.GrantRun {
		t.Fatalf("the key's first copy (number %d): grant %v with %d ahead, want GrantRun: --ledger did not release the source's numbers", first, g, ahead)
	}
}
