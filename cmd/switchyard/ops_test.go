package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// opsEnv is an embedded broker file and a SQLite ledger file for the
// operator commands, with Ops over them to seed and check.
type opsEnv struct {
	t        *testing.T
	ctx      context.Context
	url, dsn string
	b        *broker.Broker
	L        ledger.Ledger
	ops      *admin.Ops
}

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	e := &opsEnv{t: t, ctx: ctx, url: "embedded://" + filepath.Join(dir, "q.db"), dsn: "sqlite://" + filepath.Join(dir, "l.db")}
	var err error
	if e.L, err = ledger.Open(ctx, e.dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.L.Close() })
	if e.b, err = broker.Open(ctx, e.url, &broker.Options{Dedup: e.L}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	// The application's own Ops: its servers serve custom-lane too.
	lanes := append(defaultLaneNames(), "custom-lane")
	if e.ops, err = admin.New(admin.Config{Broker: e.b, Ledger: e.L, Lanes: lanes, Kinds: map[string]admin.KindSpec{"pdf.parse": {}}}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *opsEnv) enqueue(lane, tenant, args string) string {
	e.t.Helper()
	r, err := e.ops.Enqueue(e.ctx, admin.Scope{}, admin.EnqueueRequest{Kind: "pdf.parse", Lane: lane, Tenant: tenant, Args: json.RawMessage(args)})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.ID
}

// kill dead-letters every ready message of lane, as the runtime would.
func (e *opsEnv) kill(lane string, reason broker.Reason, msg string) {
	e.t.Helper()
	ds, err := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: lane, Max: 100, Lease: time.Minute})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, d := range ds {
		for _, to := range []ledger.State{ledger.Running, ledger.Dead} {
			if _, err := e.L.Transition(e.ctx, ledger.TransitionRequest{ID: d.ID, To: to, Reason: string(reason), Attempt: 1}); err != nil {
				e.t.Fatal(err)
			}
		}
		if err := e.b.DeadLetter(e.ctx, d, &broker.DeadLetter{Reason: reason, Error: msg,
			Attempts: []broker.AttemptRecord{{Attempt: 1, Start: time.Now(), Error: msg, Worker: "w1"}}}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// dead lists the IDs of every dead letter, sorted.
func (e *opsEnv) dead() []string {
	e.t.Helper()
	items, err := e.ops.DeadLetters(e.ctx, admin.Scope{}, admin.DeadFilter{Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, it := range items {
		out = append(out, it.ID)
	}
	slices.Sort(out)
	return out
}

func (e *opsEnv) state(id string) ledger.State {
	e.t.Helper()
	t, err := e.L.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return t.State
}

func (e *opsEnv) tasks() int {
	e.t.Helper()
	ts, err := e.L.List(e.ctx, ledger.Filter{Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(ts)
}

func (e *opsEnv) stats(lane string) broker.Stats {
	e.t.Helper()
	s, err := e.b.Stats(e.ctx, lane)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// withStdin makes the commands read s as standard input.
func withStdin(t *testing.T, s string) {
	old := stdin
	stdin = strings.NewReader(s)
	t.Cleanup(func() { stdin = old })
}

// expectFail runs args and checks a failure with code and a stderr that
// contains want.
func expectFail(t *testing.T, code int, want string, args ...string) {
	t.Helper()
	got, out, errs := runCLI(t, args...)
	if got != code || !strings.Contains(errs, want) {
		t.Errorf("%v: code %d (want %d), stderr %q (want %q), stdout %q", args, got, code, errs, want, out)
	}
}

func TestCLI_DLQ(t *testing.T) {
	e := newOpsEnv(t)
	a := e.enqueue("batch", "acme", `{"doc":"a"}`)
	b := e.enqueue("batch", "acme", `{"doc":"b"}`)
	c := e.enqueue("batch", "globex", `{"doc":"c"}`)
	e.kill("batch", broker.ReasonPermanent, "not a PDF")
	d := e.enqueue("interactive", "", `{"doc":"d"}`)
	e.kill("interactive", broker.ReasonMaxAttempts, "timeout")
	all := e.dead()
	common := []string{"--broker", e.url, "--ledger", e.dsn}

	// ls: a table, every lane; --lane, --reason and --json as before.
	code, out, errs := runCLI(t, append([]string{"dlq", "ls"}, common...)...)
	if code != 0 || !strings.Contains(out, "REASON") || !strings.Contains(out, "not a PDF") || !strings.Contains(out, "max_attempts") || strings.Count(out, "\n") != 5 {
		t.Fatalf("dlq ls: code %d\n%s%s", code, out, errs)
	}
	code, out, _ = runCLI(t, "dlq", "ls", "--broker", e.url, "--lane", "batch", "--json", "--tenant", "acme")
	var rows []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 || rows[0]["reason"] != "permanent_error" ||
		rows[0]["attempts"].(float64) != 1 || rows[0]["lane"] != "batch" || rows[0]["dead_at"] == "" {
		t.Fatalf("dlq ls --json: code %d %s", code, out)
	}
	if code, out, _ = runCLI(t, "dlq", "ls", "--broker", e.url, "--reason", "max_attempts", "--json"); code != 0 || !strings.Contains(out, d) || strings.Contains(out, a) {
		t.Errorf("dlq ls --reason: %d %s", code, out)
	}

	// show: the attempt history and the arguments.
	code, out, _ = runCLI(t, "dlq", "show", c, "--broker", e.url)
	if code != 0 || !strings.Contains(out, "globex") || !strings.Contains(out, `{"doc":"c"}`) || !strings.Contains(out, "attempts:") || !strings.Contains(out, "w1") {
		t.Errorf("dlq show: %d\n%s", code, out)
	}
	var one map[string]any
	code, out, _ = runCLI(t, "dlq", "show", c, "--broker", e.url, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &one) != nil || one["id"] != c || one["args"].(map[string]any)["doc"] != "c" || len(one["history"].([]any)) != 1 {
		t.Errorf("dlq show --json: %d %s", code, out)
	}

	// Bad input: clear message, non-zero exit, nothing changed.
	expectFail(t, 1, "not found", "dlq", "show", "nosuch", "--broker", e.url)
	expectFail(t, 1, "no dead letter nosuch", append([]string{"dlq", "replay", "--id", "nosuch", "--yes"}, common...)...)
	expectFail(t, 1, "no dead letter nosuch", append([]string{"dlq", "purge", "--id", a, "--id", "nosuch", "--yes"}, common...)...)
	expectFail(t, 1, "unknown dead-letter reason", append([]string{"dlq", "purge", "--reason", "nosuch", "--yes"}, common...)...)
	expectFail(t, 1, "lane", append([]string{"dlq", "ls", "--lane", "bad lane"}, common...)...)
	expectFail(t, 2, "missing required flag --to", append([]string{"dlq", "move", "--id", a, "--yes"}, common...)...)
	expectFail(t, 1, "target lane", append([]string{"dlq", "move", "--id", a, "--to", "bad lane", "--yes"}, common...)...)
	expectFail(t, 2, "missing required flag --broker", "dlq", "ls")
	expectFail(t, 1, "nosuch", "dlq", "ls", "--broker", "nosuch://x")
	expectFail(t, 1, "", "dlq", "ls", "--broker", e.url+"?bogus=1")
	expectFail(t, 2, "unknown dlq command", "dlq", "frob", "--broker", e.url)
	expectFail(t, 2, "want 1 argument", "dlq", "show", "--broker", e.url)
	// Not confirmed: shows what it would affect, changes nothing.
	withStdin(t, "n\n")
	code, out, errs = runCLI(t, append([]string{"dlq", "purge", "--lane", "batch"}, common...)...)
	if code != 1 || !strings.Contains(errs, "purge these 3 dead letters for good?") || !strings.Contains(errs, c) || !strings.Contains(errs, "nothing purged") {
		t.Errorf("unconfirmed purge: %d\n%s\n%s", code, out, errs)
	}
	if got := e.dead(); !slices.Equal(got, all) {
		t.Fatalf("bad input changed the dead letters: %v, want %v", got, all)
	}

	// replay by id, confirmed on stdin; the ledger names the actor.
	before, err := e.L.Get(e.ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	withStdin(t, "y\n")
	code, out, errs = runCLI(t, append([]string{"dlq", "replay", "--id", a, "--actor", "operator:test"}, common...)...)
	if code != 0 || !strings.Contains(out, "replayed 1 dead letter(s)") || !strings.Contains(errs, "replay this dead letter?") {
		t.Fatalf("dlq replay: %d\n%s%s", code, out, errs)
	}
	evs, _ := e.L.Events(e.ctx, a)
	if last := evs[len(evs)-1]; e.state(a) != ledger.Queued || last.Reason != "replayed" || last.Actor != "operator:test" {
		t.Errorf("replayed task: %s %+v", e.state(a), last)
	}
	// The replayed task is lined up for its next attempt, and says so
	// rather than counting an attempt that has not run (issue 20, item 8).
	next := before.Attempt + 1
	code, out, _ = runCLI(t, append([]string{"tasks", "show", a, "--json"}, common...)...)
	var shown struct {
		Attempt     int `json:"attempt"`
		NextAttempt int `json:"next_attempt"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.NextAttempt != next {
		t.Errorf("tasks show of the replayed task: %d %+v, want next_attempt %d\n%s", code, shown, next, out)
	}
	code, out, _ = runCLI(t, append([]string{"tasks", "ls", "--state", "queued"}, common...)...)
	if code != 0 || !strings.Contains(out, "next "+strconv.Itoa(next)) {
		t.Errorf("tasks ls of the replayed task does not say \"next %d\": %d\n%s", next, code, out)
	}
	// move to a lane nobody serves is refused, naming the known ones.
	expectFail(t, 1, `unknown lane "reprocess" (known lanes: batch, human-review, interactive, scheduled)`,
		append([]string{"dlq", "move", "--id", b, "--to", "reprocess", "--yes"}, common...)...)
	// move with --json, to a lane named with --lanes.
	code, out, _ = runCLI(t, append([]string{"dlq", "move", "--id", b, "--to", "reprocess", "--lanes", "reprocess", "--yes", "--json"}, common...)...)
	var rep struct {
		Done   int
		Failed []any
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Done != 1 || len(rep.Failed) != 0 || e.stats("reprocess").Ready != 1 {
		t.Fatalf("dlq move: %d %s", code, out)
	}
	// purge by filter.
	code, out, _ = runCLI(t, append([]string{"dlq", "purge", "--tenant", "globex", "--yes"}, common...)...)
	if code != 0 || !strings.Contains(out, "purged 1") {
		t.Fatalf("dlq purge: %d %s", code, out)
	}
	if got := e.dead(); !slices.Equal(got, []string{d}) {
		t.Errorf("left: %v", got)
	}
	// The old form: replay a lane without a ledger.
	code, out, _ = runCLI(t, "dlq", "replay", "--broker", e.url, "--lane", "interactive", "--yes")
	if code != 0 || !strings.Contains(out, "replayed 1") {
		t.Errorf("dlq replay --lane: %d %s", code, out)
	}
	code, out, _ = runCLI(t, "dlq", "ls", "--broker", e.url, "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("dlq ls after everything: %d %q", code, out)
	}
	code, out, _ = runCLI(t, "dlq", "purge", "--broker", e.url, "--yes", "--all")
	if code != 0 || !strings.Contains(out, "no dead letters match") {
		t.Errorf("purge of nothing: %d %q", code, out)
	}
}

func TestCLI_Tasks(t *testing.T) {
	e := newOpsEnv(t)
	a := e.enqueue("batch", "acme", `{"doc":"a"}`)
	e.kill("batch", broker.ReasonPermanent, "not a PDF")
	b := e.enqueue("batch", "globex", `{"doc":"b"}`)
	common := []string{"--broker", e.url, "--ledger", e.dsn}

	code, out, errs := runCLI(t, append([]string{"tasks", "ls"}, common...)...)
	if code != 0 || !strings.Contains(out, "STATE") || !strings.Contains(out, a) || !strings.Contains(out, b) || !strings.Contains(out, "dead") {
		t.Fatalf("tasks ls: %d\n%s%s", code, out, errs)
	}
	var page struct {
		Tasks []map[string]any
		Next  string
	}
	code, out, _ = runCLI(t, append([]string{"tasks", "ls", "--state", "queued", "--json"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Tasks) != 1 || page.Tasks[0]["id"] != b || page.Tasks[0]["tenant"] != "globex" {
		t.Fatalf("tasks ls --state --json: %d %s", code, out)
	}
	code, out, errs = runCLI(t, append([]string{"tasks", "ls", "--limit", "1", "--json"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Tasks) != 1 || page.Next != a {
		t.Fatalf("tasks ls --limit 1: %d %s %s", code, out, errs)
	}
	if code, out, _ = runCLI(t, append([]string{"tasks", "ls", "--after", a, "--tenant", "globex"}, common...)...); code != 0 || !strings.Contains(out, b) || strings.Contains(out, a) {
		t.Errorf("tasks ls --after: %d %s", code, out)
	}
	code, out, _ = runCLI(t, append([]string{"tasks", "show", a}, common...)...)
	if code != 0 || !strings.Contains(out, "timeline:") || !strings.Contains(out, "enqueued") || !strings.Contains(out, "permanent_error") || !strings.Contains(out, `{"doc":"a"}`) {
		t.Errorf("tasks show: %d\n%s", code, out)
	}
	var info map[string]any
	code, out, _ = runCLI(t, append([]string{"tasks", "show", a, "--json"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info["state"] != "dead" || len(info["events"].([]any)) != 3 {
		t.Errorf("tasks show --json: %d %s", code, out)
	}
	before := e.tasks()
	expectFail(t, 1, "unknown task state", append([]string{"tasks", "ls", "--state", "nosuch"}, common...)...)
	expectFail(t, 1, "not found", append([]string{"tasks", "show", "nosuch"}, common...)...)
	expectFail(t, 2, "missing required flag --ledger", "tasks", "ls", "--broker", e.url)
	expectFail(t, 1, "", "tasks", "ls", "--broker", "nosuch://x", "--ledger", e.dsn)
	expectFail(t, 1, "", "tasks", "ls", "--broker", e.url, "--ledger", "nosuch://x")
	expectFail(t, 2, "unknown tasks command", append([]string{"tasks", "frob"}, common...)...)
	if e.tasks() != before || e.state(a) != ledger.Dead {
		t.Error("bad input changed the ledger")
	}
}

func TestCLI_Lanes(t *testing.T) {
	e := newOpsEnv(t)
	e.enqueue("custom-lane", "", `{}`)
	common := []string{"--broker", e.url, "--ledger", e.dsn}
	code, out, _ := runCLI(t, append([]string{"lanes", "pause", "batch", "--actor", "operator:ann"}, common...)...)
	if code != 0 || !strings.Contains(out, "paused lane batch") {
		t.Fatalf("lanes pause: %d %s", code, out)
	}
	code, out, errs := runCLI(t, append([]string{"lanes", "ls"}, common...)...)
	if code != 0 || !strings.Contains(out, "custom-lane") || !strings.Contains(out, "paused by operator:ann") || !strings.Contains(out, "interactive") {
		t.Fatalf("lanes ls: %d\n%s%s", code, out, errs)
	}
	var rows []map[string]any
	code, out, _ = runCLI(t, append([]string{"lanes", "ls", "--json"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 5 {
		t.Fatalf("lanes ls --json: %d %s", code, out)
	}
	for _, r := range rows {
		if (r["lane"] == "batch") != (r["paused"] == true) || r["lane"] == "custom-lane" && r["ready"].(float64) != 1 {
			t.Errorf("row %v", r)
		}
	}
	if code, out, _ = runCLI(t, append([]string{"lanes", "resume", "batch"}, common...)...); code != 0 || !strings.Contains(out, "resumed lane batch") {
		t.Fatalf("lanes resume: %d %s", code, out)
	}
	if _, out, _ = runCLI(t, append([]string{"lanes", "ls"}, common...)...); strings.Contains(out, "paused") {
		t.Errorf("still paused:\n%s", out)
	}
	expectFail(t, 2, "missing required flag --ledger", "lanes", "pause", "batch", "--broker", e.url)
	expectFail(t, 1, "lane", append([]string{"lanes", "pause", "bad lane"}, common...)...)
	expectFail(t, 2, "want 1 argument", append([]string{"lanes", "pause"}, common...)...)
	expectFail(t, 1, "", "lanes", "ls", "--broker", "nosuch://x")
	if ps, _ := e.ops.Client().PausedLanes(e.ctx); len(ps) != 0 {
		t.Errorf("bad input paused %v", ps)
	}
}

func TestCLI_Peek(t *testing.T) {
	e := newOpsEnv(t)
	a := e.enqueue("batch", "acme", `{"doc":"a"}`)
	b := e.enqueue("batch", "globex", `{"doc":"b"}`)
	code, out, errs := runCLI(t, "peek", "--broker", e.url, "--lane", "batch")
	if code != 0 || !strings.Contains(out, a) || !strings.Contains(out, b) || !strings.Contains(out, `{"doc":"a"}`) {
		t.Fatalf("peek: %d\n%s%s", code, out, errs)
	}
	var rows []map[string]any
	code, out, _ = runCLI(t, "peek", "--broker", e.url, "--lane", "batch", "-n", "1", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0]["kind"] != "pdf.parse" {
		t.Fatalf("peek --json: %d %s", code, out)
	}
	code, out, _ = runCLI(t, "peek", "--broker", e.url, "--lane", "batch", "--tenant", "globex", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0]["id"] != b {
		t.Fatalf("peek --tenant: %d %s", code, out)
	}
	expectFail(t, 2, "missing required flag --lane", "peek", "--broker", e.url)
	expectFail(t, 1, "lane", "peek", "--broker", e.url, "--lane", "bad lane")
	expectFail(t, 1, "-n", "peek", "--broker", e.url, "--lane", "batch", "-n", "0")
	// Nothing taken, no attempt spent.
	ds, _ := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute})
	if len(ds) != 2 || ds[0].Attempt != 1 || ds[1].Attempt != 1 {
		t.Errorf("after peeks: %d messages", len(ds))
	}
}

func TestCLI_Enqueue(t *testing.T) {
	e := newOpsEnv(t)
	common := []string{"--broker", e.url, "--ledger", e.dsn}
	code, out, errs := runCLI(t, append([]string{"enqueue", "--kind", "mail.send", "--args", `{"to": "a@b"}`, "--lane", "interactive", "--meta", "src=cli"}, common...)...)
	if code != 0 || !strings.HasPrefix(out, "enqueued ") {
		t.Fatalf("enqueue: %d %s %s", code, out, errs)
	}
	id := strings.TrimSpace(strings.TrimPrefix(out, "enqueued "))
	task, err := e.L.Get(e.ctx, id)
	if err != nil || string(task.Args) != `{"to":"a@b"}` || task.Lane != "interactive" || task.Metadata["src"] != "cli" {
		t.Fatalf("task: %+v %v", task, err)
	}
	// Arguments from stdin, --json, and the same key twice.
	var res struct {
		ID        string
		Duplicate bool
	}
	withStdin(t, `{"doc": "x"}`)
	code, out, _ = runCLI(t, append([]string{"enqueue", "--kind", "pdf.parse", "--key", "k1", "--tenant", "acme", "--json"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Duplicate {
		t.Fatalf("enqueue from stdin: %d %s", code, out)
	}
	first := res.ID
	if task, _ := e.L.Get(e.ctx, first); string(task.Args) != `{"doc":"x"}` || task.Tenant != "acme" {
		t.Errorf("stdin task: %+v", task)
	}
	code, out, _ = runCLI(t, append([]string{"enqueue", "--kind", "pdf.parse", "--key", "k1", "--tenant", "acme", "--args", `{"doc":"x"}`}, common...)...)
	if code != 0 || !strings.Contains(out, "duplicate") || !strings.Contains(out, first) {
		t.Errorf("duplicate: %d %s", code, out)
	}
	// The same key with other arguments is refused (admin.ErrKeyReused).
	if code, out, errs := runCLI(t, append([]string{"enqueue", "--kind", "pdf.parse", "--key", "k1", "--tenant", "acme", "--args", "{}"}, common...)...); code == 0 {
		t.Errorf("same key, other args: %d %s %s, want an error", code, out, errs)
	}
	before, ready := e.tasks(), e.stats("batch").Ready
	withStdin(t, "")
	for _, c := range []struct {
		code int
		want string
		args []string
	}{
		{2, "missing required flag --kind", []string{"--args", "{}"}},
		{1, "must be a JSON object", []string{"--kind", "k", "--args", "[1]"}},
		{1, "must be a JSON object", []string{"--kind", "k", "--args", "{"}},
		{1, "kind", []string{"--kind", "bad kind", "--args", "{}"}},
		{1, "exclusive", []string{"--kind", "k", "--args", "{}", "--delay", "1m", "--run-at", "2030-01-01T00:00:00Z"}},
		{1, "not a duration", []string{"--kind", "k", "--args", "{}", "--delay", "soon"}},
		{1, "RFC 3339", []string{"--kind", "k", "--args", "{}", "--run-at", "tomorrow"}},
		{1, "key=value", []string{"--kind", "k", "--args", "{}", "--meta", "novalue"}},
		{1, "lane", []string{"--kind", "k", "--args", "{}", "--lane", "bad lane"}},
		{1, "delay 2562047h0m0s runs past the supported range", []string{"--kind", "k", "--args", "{}", "--delay", "2562047h"}},
		{1, "outside the supported range", []string{"--kind", "k", "--args", "{}", "--run-at", "2263-01-01T00:00:00Z"}},
		{1, "outside the supported range", []string{"--kind", "k", "--args", "{}", "--deadline", "9999-01-01T00:00:00Z"}},
		{1, "max_attempts 3000000000", []string{"--kind", "k", "--args", "{}", "--max-attempts", "3000000000"}},
	} {
		expectFail(t, c.code, c.want, append(append([]string{"enqueue"}, c.args...), common...)...)
	}
	expectFail(t, 1, "", "enqueue", "--kind", "k", "--args", "{}", "--broker", "nosuch://x")
	if e.tasks() != before || e.stats("batch").Ready != ready {
		t.Errorf("bad input enqueued something: %d → %d tasks", before, e.tasks())
	}
}

func TestCLI_Review(t *testing.T) {
	e := newOpsEnv(t)
	id := e.enqueue("batch", "acme", `{"refund":500}`)
	ds, err := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Minute})
	if err != nil || len(ds) != 1 || e.b.Ack(e.ctx, ds[0]) != nil {
		t.Fatalf("receive: %v", err)
	}
	for _, to := range []ledger.State{ledger.Running, ledger.AwaitingReview} {
		if _, err := e.L.Transition(e.ctx, ledger.TransitionRequest{ID: id, To: to, Reason: "test", Attempt: 1,
			Detail: `{"Reason":"large refund","Action":"refund 500"}`}); err != nil {
			t.Fatal(err)
		}
	}
	common := []string{"--broker", e.url, "--ledger", e.dsn}
	code, out, errs := runCLI(t, append([]string{"review", "ls"}, common...)...)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "large refund") {
		t.Fatalf("review ls: %d\n%s%s", code, out, errs)
	}
	var rows []map[string]any
	code, out, _ = runCLI(t, append([]string{"review", "ls", "--json", "--tenant", "globex"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 0 {
		t.Errorf("review ls --tenant globex: %d %s", code, out)
	}
	if code, out, _ = runCLI(t, append([]string{"review", "show", id, "--json"}, common...)...); code != 0 || !strings.Contains(out, `"action": "refund 500"`) {
		t.Errorf("review show --json: %d %s", code, out)
	}
	expectFail(t, 1, "not found", append([]string{"review", "approve", id, "--reviewer", "bob", "--tenant", "globex"}, common...)...)
	expectFail(t, 1, "--reason", append([]string{"review", "reject", id, "--reviewer", "bob"}, common...)...)
	expectFail(t, 1, "--reviewer", append([]string{"review", "claim", id}, common...)...)
	if e.state(id) != ledger.AwaitingReview {
		t.Fatal("bad input changed the task")
	}
	if code, out, _ = runCLI(t, append([]string{"review", "claim", id, "--reviewer", "bob"}, common...)...); code != 0 || !strings.Contains(out, "claimed") {
		t.Errorf("claim: %d %s", code, out)
	}
	if code, out, _ = runCLI(t, append([]string{"review", "approve", id, "--reviewer", "bob", "--note", "ok", "--tenant", "acme"}, common...)...); code != 0 || !strings.Contains(out, "approved") {
		t.Errorf("approve: %d %s", code, out)
	}
	if e.state(id) != ledger.Queued || e.stats("batch").Ready != 1 {
		t.Errorf("approved task: %s", e.state(id))
	}
}
