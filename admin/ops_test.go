package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
)

// env is an embedded broker (a temporary file) with a SQLite ledger and
// Ops over them.
type env struct {
	t   *testing.T
	ctx context.Context
	b   *broker.Broker
	L   ledger.Ledger
	ops *Ops
}

func newEnv(t *testing.T, withLedger bool) *env {
	t.Helper()
	return newEnvURL(t, "embedded://"+filepath.Join(t.TempDir(), "q.db"), withLedger, nil)
}

// newEnvURL is newEnv on the broker at rawURL, showing lanes.
func newEnvURL(t *testing.T, rawURL string, withLedger bool, lanes []string) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	e := &env{t: t, ctx: ctx}
	opts := &broker.Options{}
	if withLedger {
		L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "ledger.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { L.Close() })
		e.L, opts.Dedup = L, L
	}
	b, err := broker.Open(ctx, rawURL, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	e.b = b
	e.ops, err = New(Config{Broker: b, Ledger: e.L, Lanes: lanes, Kinds: map[string]KindSpec{
		"pdf.parse": {},
		"mail.send": {Lane: "interactive", Validate: func(a json.RawMessage) error {
			var v struct{ To string }
			if json.Unmarshal(a, &v) != nil || v.To == "" {
				return errors.New("to is required")
			}
			return nil
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// enqueue enqueues a pdf.parse task through Ops.
func (e *env) enqueue(lane, tenant, args string) string {
	e.t.Helper()
	r, err := e.ops.Enqueue(e.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", Lane: lane, Tenant: tenant, Args: json.RawMessage(args)})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.ID
}

// kill receives every ready message of lane and dead-letters it with
// reason, as the runtime would (ledger: queued → running → dead).
func (e *env) kill(lane string, reason broker.Reason) []string {
	e.t.Helper()
	var ids []string
	for i := 0; i < 100; i++ {
		ds, err := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: lane, Max: 50, Lease: time.Minute})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(ds) == 0 {
			return ids
		}
		for _, d := range ds {
			if e.L != nil {
				e.transition(d.ID, ledger.Running, "attempt_started")
				e.transition(d.ID, ledger.Dead, string(reason))
			}
			dl := &broker.DeadLetter{Reason: reason, Error: "boom " + d.ID, Attempts: []broker.AttemptRecord{{Attempt: 1, Start: time.Now(), Error: "boom"}}}
			if err := e.b.DeadLetter(e.ctx, d, dl); err != nil {
				e.t.Fatal(err)
			}
			ids = append(ids, d.ID)
		}
	}
	e.t.Fatal("lane never drained")
	return nil
}

func (e *env) transition(id string, to ledger.State, reason string) {
	e.t.Helper()
	req := ledger.TransitionRequest{ID: id, To: to, Reason: reason, Actor: "test"}
	if to == ledger.Running {
		req.Attempt = 1
	}
	if _, err := e.L.Transition(e.ctx, req); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) stats(lane string) broker.Stats {
	e.t.Helper()
	s, err := e.b.Stats(e.ctx, lane)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) state(id string) ledger.State {
	e.t.Helper()
	t, err := e.L.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return t.State
}

// lastEvent returns the task's last event.
func (e *env) lastEvent(id string) ledger.Event {
	e.t.Helper()
	evs, err := e.L.Events(e.ctx, id)
	if err != nil || len(evs) == 0 {
		e.t.Fatalf("events of %s: %v (%d)", id, err, len(evs))
	}
	return evs[len(evs)-1]
}

func ids(items []DeadItem) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.ID)
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestNew_BadConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("nil broker: %v", err)
	}
	e := newEnv(t, false)
	for _, c := range []Config{
		{Broker: e.b, Lanes: []string{"bad lane"}},
		{Broker: e.b, Kinds: map[string]KindSpec{"bad kind": {}}},
		{Broker: e.b, Kinds: map[string]KindSpec{"k": {Lane: "bad lane"}}},
	} {
		if _, err := New(c); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestOps_Lanes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.enqueue("batch", "", `{}`)
	// A program's own lane: published by its client, not through Ops
	// (which refuses lanes it does not know).
	if _, err := e.ops.Enqueue(e.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", Lane: "custom-lane", Args: json.RawMessage(`{}`)}); !errors.Is(err, ErrUnknownLane) {
		t.Fatalf("enqueue to a lane nobody knows: %v, want ErrUnknownLane", err)
	}
	for range 2 {
		if _, err := e.b.PublishOne(e.ctx, &broker.Message{Lane: "custom-lane", Kind: "pdf.parse", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.ops.PauseLane(e.ctx, "batch", "operator:alice"); err != nil {
		t.Fatal(err)
	}
	ls, err := e.ops.Lanes(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]LaneInfo{}
	var names []string
	for _, l := range ls {
		got[l.Lane] = l
		names = append(names, l.Lane)
	}
	if !slices.Equal(names[:4], []string{"interactive", "scheduled", "batch", "human-review"}) || got["custom-lane"].Ready != 2 {
		t.Fatalf("lanes: %+v", ls)
	}
	if b := got["batch"]; !b.Paused || b.PausedBy != "operator:alice" || b.Ready != 1 {
		t.Errorf("batch: %+v", b)
	}
	if i := got["interactive"]; i.Paused || i.Objective != 100*time.Millisecond || i.Late {
		t.Errorf("interactive: %+v", i)
	}
	if err := e.ops.ResumeLane(e.ctx, "batch", "operator:alice"); err != nil {
		t.Fatal(err)
	}
	ls, _ = e.ops.Lanes(e.ctx)
	for _, l := range ls {
		if l.Paused {
			t.Errorf("%s still paused", l.Lane)
		}
	}
	if err := e.ops.PauseLane(e.ctx, "bad lane", "x"); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("pause bad lane: %v", err)
	}
	noLedger := newEnv(t, false)
	if err := noLedger.ops.PauseLane(e.ctx, "batch", "x"); !errors.Is(err, ErrNoLedger) {
		t.Errorf("pause without ledger: %v", err)
	}
	if ls, err := noLedger.ops.Lanes(e.ctx); err != nil || len(ls) != 4 {
		t.Errorf("lanes without ledger: %v %+v", err, ls)
	}
}

func TestOps_Enqueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	args := `{ "to": "a@example.com",
	  "n": [1, 2] }`
	r, err := e.ops.Enqueue(e.ctx, Scope{Tenant: "acme"}, EnqueueRequest{Kind: "mail.send", Args: json.RawMessage(args), IdempotencyKey: "k1",
		Delay: "1h", Metadata: map[string]string{"src": "test"}})
	if err != nil || r.Duplicate {
		t.Fatalf("enqueue: %+v %v", r, err)
	}
	task, err := e.L.Get(e.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(task.Args) != `{"to":"a@example.com","n":[1,2]}` || task.Tenant != "acme" || task.Lane != "interactive" ||
		task.Metadata["src"] != "test" || task.RunAt.Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("task: %+v args %s", task, task.Args)
	}
	// The same key is the same task.
	r2, err := e.ops.Enqueue(e.ctx, Scope{Tenant: "acme"}, EnqueueRequest{Kind: "mail.send", Args: json.RawMessage(args), IdempotencyKey: "k1",
		Delay: "1h", Metadata: map[string]string{"src": "test"}})
	if err != nil || !r2.Duplicate || r2.ID != r.ID {
		t.Errorf("duplicate: %+v %v", r2, err)
	}
	// Absent args are {}; the lane is given.
	r3, err := e.ops.Enqueue(e.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", Lane: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	if task, _ := e.L.Get(e.ctx, r3.ID); string(task.Args) != "{}" || task.Lane != "batch" {
		t.Errorf("no args: %+v", task)
	}
	before, _ := e.L.List(e.ctx, ledger.Filter{})
	stBefore := e.stats("interactive")
	for name, c := range map[string]struct {
		sc Scope
		r  EnqueueRequest
	}{
		"no kind":          {Scope{}, EnqueueRequest{Args: json.RawMessage(`{}`)}},
		"unknown kind":     {Scope{}, EnqueueRequest{Kind: "nosuch", Args: json.RawMessage(`{}`)}},
		"array args":       {Scope{}, EnqueueRequest{Kind: "pdf.parse", Args: json.RawMessage(`[1]`)}},
		"string args":      {Scope{}, EnqueueRequest{Kind: "pdf.parse", Args: json.RawMessage(`"x"`)}},
		"null args":        {Scope{}, EnqueueRequest{Kind: "pdf.parse", Args: json.RawMessage(`null`)}},
		"broken args":      {Scope{}, EnqueueRequest{Kind: "pdf.parse", Args: json.RawMessage(`{"a":`)}},
		"validator":        {Scope{}, EnqueueRequest{Kind: "mail.send", Args: json.RawMessage(`{"to":""}`)}},
		"bad lane":         {Scope{}, EnqueueRequest{Kind: "pdf.parse", Lane: "bad lane"}},
		"other tenant":     {Scope{Tenant: "acme"}, EnqueueRequest{Kind: "pdf.parse", Tenant: "globex"}},
		"control in key":   {Scope{}, EnqueueRequest{Kind: "pdf.parse", IdempotencyKey: "a\nb"}},
		"long tenant":      {Scope{}, EnqueueRequest{Kind: "pdf.parse", Tenant: strings.Repeat("t", 300)}},
		"run_at and delay": {Scope{}, EnqueueRequest{Kind: "pdf.parse", RunAt: time.Now().Add(time.Hour), Delay: "1m"}},
		"bad delay":        {Scope{}, EnqueueRequest{Kind: "pdf.parse", Delay: "soon"}},
		"negative delay":   {Scope{}, EnqueueRequest{Kind: "pdf.parse", Delay: "-1m"}},
		"negative max":     {Scope{}, EnqueueRequest{Kind: "pdf.parse", MaxAttempts: -1}},
	} {
		_, err := e.ops.Enqueue(e.ctx, c.sc, c.r)
		if !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	after, _ := e.L.List(e.ctx, ledger.Filter{})
	if len(after) != len(before) || e.stats("interactive") != stBefore || e.stats("batch").Ready != 1 {
		t.Errorf("bad requests enqueued something: %d tasks before, %d after", len(before), len(after))
	}
	// Without a ledger, the broker's own deduplication answers.
	nl := newEnv(t, false)
	a, err := nl.ops.Enqueue(nl.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := nl.ops.Enqueue(nl.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", IdempotencyKey: "k"}); err != nil || !b.Duplicate || b.ID != a.ID {
		t.Errorf("dedup without ledger: %+v %v", b, err)
	}
}

func TestOps_Tasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	var acme []string
	for i := 0; i < 5; i++ {
		acme = append(acme, e.enqueue("batch", "acme", fmt.Sprintf(`{"i":%d}`, i)))
	}
	other := e.enqueue("interactive", "globex", `{}`)
	e.kill("interactive", broker.ReasonPermanent)

	// Paging, oldest first.
	var seen []string
	after := ""
	for i := 0; i < 10; i++ {
		p, err := e.ops.Tasks(e.ctx, Scope{}, TaskFilter{Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, t := range p.Tasks {
			seen = append(seen, t.ID)
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if want := append(slices.Clone(acme), other); !slices.Equal(seen, want) {
		t.Errorf("paged %v, want %v", seen, want)
	}
	// Filters.
	p, err := e.ops.Tasks(e.ctx, Scope{}, TaskFilter{States: []ledger.State{ledger.Dead}})
	if err != nil || len(p.Tasks) != 1 || p.Tasks[0].ID != other || p.Next != "" {
		t.Errorf("dead: %+v %v", p, err)
	}
	if p, _ := e.ops.Tasks(e.ctx, Scope{}, TaskFilter{Lane: "batch", Kind: "pdf.parse", Tenant: "acme"}); len(p.Tasks) != 5 {
		t.Errorf("lane/kind/tenant filter: %d tasks", len(p.Tasks))
	}
	// Scope: a scoped caller sees its tenant only; naming another yields
	// nothing.
	if p, _ := e.ops.Tasks(e.ctx, Scope{Tenant: "globex"}, TaskFilter{}); len(p.Tasks) != 1 || p.Tasks[0].ID != other {
		t.Errorf("scoped list: %+v", p.Tasks)
	}
	if p, err := e.ops.Tasks(e.ctx, Scope{Tenant: "globex"}, TaskFilter{Tenant: "acme"}); err != nil || len(p.Tasks) != 0 {
		t.Errorf("scoped list naming another tenant: %+v %v", p, err)
	}
	info, err := e.ops.Task(e.ctx, Scope{Tenant: "globex"}, other)
	if err != nil || info.Task.ID != other || len(info.Events) != 3 || info.Events[2].To != ledger.Dead {
		t.Errorf("task: %+v %v", info, err)
	}
	if _, err := e.ops.Task(e.ctx, Scope{Tenant: "acme"}, other); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("another tenant's task: %v", err)
	}
	if _, err := e.ops.Task(e.ctx, Scope{}, "nosuch"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("unknown task: %v", err)
	}
	for _, f := range []TaskFilter{{States: []ledger.State{"nosuch"}}, {Lane: "bad lane"}, {Kind: "bad kind"}, {Limit: -1}} {
		if _, err := e.ops.Tasks(e.ctx, Scope{}, f); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%+v: %v", f, err)
		}
	}
	nl := newEnv(t, false)
	if _, err := nl.ops.Tasks(e.ctx, Scope{}, TaskFilter{}); !errors.Is(err, ErrNoLedger) {
		t.Errorf("without ledger: %v", err)
	}
	if _, err := nl.ops.Task(e.ctx, Scope{}, "x"); !errors.Is(err, ErrNoLedger) {
		t.Errorf("without ledger: %v", err)
	}
}

func TestOps_DeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	a1 := e.enqueue("batch", "acme", `{"n":1}`)
	a2 := e.enqueue("batch", "acme", `{"n":2}`)
	g1 := e.enqueue("batch", "globex", `{"n":3}`)
	e.kill("batch", broker.ReasonPermanent)
	i1 := e.enqueue("interactive", "acme", `{"n":4}`)
	e.kill("interactive", broker.ReasonMaxAttempts)

	for round := 0; round < 3; round++ { // listing takes nothing
		all, err := e.ops.DeadLetters(e.ctx, Scope{}, DeadFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(all), sorted([]string{a1, a2, g1, i1}); !slices.Equal(got, want) {
			t.Fatalf("round %d: %v, want %v", round, got, want)
		}
	}
	if s := e.stats("batch"); s.DeadLettered != 3 || s.InFlight != 0 {
		t.Errorf("after listing: %+v", s)
	}
	for name, c := range map[string]struct {
		sc   Scope
		f    DeadFilter
		want []string
	}{
		"lane":                   {Scope{}, DeadFilter{Lane: "batch"}, []string{a1, a2, g1}},
		"reason":                 {Scope{}, DeadFilter{Reason: broker.ReasonMaxAttempts}, []string{i1}},
		"tenant":                 {Scope{}, DeadFilter{Tenant: "globex"}, []string{g1}},
		"ids":                    {Scope{}, DeadFilter{IDs: []string{a2, i1}}, []string{a2, i1}},
		"kind":                   {Scope{}, DeadFilter{Kind: "other.kind"}, nil},
		"scoped":                 {Scope{Tenant: "acme"}, DeadFilter{}, []string{a1, a2, i1}},
		"scoped, other's id":     {Scope{Tenant: "acme"}, DeadFilter{IDs: []string{g1}}, nil},
		"scoped, naming another": {Scope{Tenant: "acme"}, DeadFilter{Tenant: "globex"}, nil},
	} {
		got, err := e.ops.DeadLetters(e.ctx, c.sc, c.f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(ids(got), sorted(c.want)) {
			t.Errorf("%s: %v, want %v", name, ids(got), sorted(c.want))
		}
	}
	if got, _ := e.ops.DeadLetters(e.ctx, Scope{}, DeadFilter{Limit: 2}); len(got) != 2 {
		t.Errorf("limit 2: %d", len(got))
	}
	it, err := e.ops.DeadLetter(e.ctx, Scope{}, "", g1)
	if err != nil || it.Lane != "batch" || it.Tenant != "globex" || it.Reason != broker.ReasonPermanent || it.Error != "boom "+g1 ||
		len(it.Attempts) != 1 || string(it.Payload) != `{"n":3}` || it.DeadAt.IsZero() {
		t.Errorf("dead letter: %+v %v", it, err)
	}
	if _, err := e.ops.DeadLetter(e.ctx, Scope{Tenant: "acme"}, "batch", g1); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("another tenant's dead letter: %v", err)
	}
	if _, err := e.ops.DeadLetter(e.ctx, Scope{}, "batch", "nosuch"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("unknown dead letter: %v", err)
	}
	for _, f := range []DeadFilter{{Lane: "bad lane"}, {Reason: "nosuch"}, {Kind: "bad kind"}, {Limit: -1}, {IDs: []string{""}}} {
		if _, err := e.ops.DeadLetters(e.ctx, Scope{}, f); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%+v: %v", f, err)
		}
	}
	if s := e.stats("batch"); s.DeadLettered != 3 || s.InFlight != 0 || s.Ready != 0 {
		t.Errorf("after lookups: %+v", s)
	}
}

func TestOps_Replay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	a1 := e.enqueue("batch", "acme", `{}`)
	a2 := e.enqueue("batch", "acme", `{}`)
	g1 := e.enqueue("batch", "globex", `{}`)
	e.kill("batch", broker.ReasonPermanent)

	// A scoped caller cannot replay another tenant's dead letter.
	rep, err := e.ops.Replay(e.ctx, Scope{Tenant: "acme"}, DeadFilter{IDs: []string{g1}}, "token:ci", nil)
	if err != nil || rep.Done != 0 || len(rep.Failed) != 1 || rep.Failed[0].ID != g1 {
		t.Fatalf("scoped replay of another tenant: %+v %v", rep, err)
	}
	if s := e.stats("batch"); s.DeadLettered != 3 || s.Ready != 0 || e.state(g1) != ledger.Dead {
		t.Fatalf("something changed: %+v", s)
	}
	var progress []string
	rep, err = e.ops.Replay(e.ctx, Scope{Tenant: "acme"}, DeadFilter{}, "operator:alice", func(done, total int) {
		progress = append(progress, fmt.Sprintf("%d/%d", done, total))
	})
	if err != nil || rep.Done != 2 || len(rep.Failed) != 0 {
		t.Fatalf("replay: %+v %v", rep, err)
	}
	if !slices.Equal(progress, []string{"1/-1", "2/-1"}) { // by filter: the total is unknown
		t.Errorf("progress %v", progress)
	}
	for _, id := range []string{a1, a2} {
		ev := e.lastEvent(id)
		if e.state(id) != ledger.Queued || ev.Reason != "replayed" || ev.Actor != "operator:alice" {
			t.Errorf("%s: %s, last event %+v", id, e.state(id), ev)
		}
	}
	if s := e.stats("batch"); s.DeadLettered != 1 || s.Ready != 2 {
		t.Errorf("after replay: %+v", s)
	}
	ds, _ := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute})
	if len(ds) != 2 || ds[0].Attempt != 1 {
		t.Errorf("replayed messages: %d", len(ds))
	}
	// Bad filter: nothing changes.
	if _, err := e.ops.Replay(e.ctx, Scope{}, DeadFilter{Reason: "nosuch"}, "x", nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("bad filter: %v", err)
	}
	if s := e.stats("batch"); s.DeadLettered != 1 {
		t.Errorf("bad filter changed something: %+v", s)
	}
}

func TestOps_MoveAndPurge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	r, err := e.ops.Enqueue(e.ctx, Scope{}, EnqueueRequest{Kind: "pdf.parse", Lane: "batch", Tenant: "acme", Args: json.RawMessage(`{"doc":"d1"}`),
		IdempotencyKey: "idem-1", OrderingKey: "ord-1", Metadata: map[string]string{"m": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	moved := r.ID
	p1 := e.enqueue("batch", "acme", `{}`)
	p2 := e.enqueue("batch", "globex", `{}`)
	e.kill("batch", broker.ReasonPermanent)

	if _, err := e.ops.Move(e.ctx, Scope{}, DeadFilter{IDs: []string{moved}}, "bad lane", "x", nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("move to a bad lane: %v", err)
	}
	if _, err := e.ops.Move(e.ctx, Scope{}, DeadFilter{IDs: []string{moved}}, "reprocess", "x", nil); !errors.Is(err, ErrUnknownLane) ||
		!strings.Contains(err.Error(), "known lanes: batch, human-review, interactive, scheduled") {
		t.Fatalf("move to a lane nobody serves: %v, want ErrUnknownLane naming the known lanes", err)
	}
	e.ops.cfg.Lanes = append(e.ops.cfg.Lanes, "reprocess") // configured: now known
	rep, err := e.ops.Move(e.ctx, Scope{Tenant: "acme"}, DeadFilter{IDs: []string{moved}}, "reprocess", "operator:bob", nil)
	if err != nil || rep.Done != 1 || len(rep.Failed) != 0 {
		t.Fatalf("move: %+v %v", rep, err)
	}
	if ev := e.lastEvent(moved); e.state(moved) != ledger.Queued || ev.Reason != "moved" || ev.Actor != "operator:bob" || !strings.Contains(ev.Detail, "reprocess") {
		t.Errorf("moved task: %s %+v", e.state(moved), ev)
	}
	// Issue 20, item 8: the ledger says where the task now is.
	if tk, err := e.L.Get(e.ctx, moved); err != nil || tk.Lane != "reprocess" {
		t.Errorf("moved task's lane in the ledger: %+v %v, want reprocess", tk, err)
	}
	ds, err := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: "reprocess", Max: 10, Lease: time.Minute})
	if err != nil || len(ds) != 1 {
		t.Fatalf("target lane: %d %v", len(ds), err)
	}
	d := ds[0]
	if d.ID != moved || d.Kind != "pdf.parse" || d.Tenant != "acme" || d.IdempotencyKey != "idem-1" || d.OrderingKey != "ord-1" ||
		string(d.Body) != `{"doc":"d1"}` || d.Headers["meta-m"] != "v" || d.Attempt != 1 {
		t.Errorf("moved message: %+v headers %v", d.Message, d.Headers)
	}
	if s := e.stats("batch"); s.DeadLettered != 2 {
		t.Errorf("after move: %+v", s)
	}

	// Purge by filter, within scope: globex's stays.
	rep, err = e.ops.Purge(e.ctx, Scope{Tenant: "acme"}, DeadFilter{Lane: "batch", Reason: broker.ReasonPermanent}, "operator:carol", nil)
	if err != nil || rep.Done != 1 {
		t.Fatalf("purge: %+v %v", rep, err)
	}
	if ev := e.lastEvent(p1); e.state(p1) != ledger.Dead || ev.Reason != "purged" || ev.Actor != "operator:carol" {
		t.Errorf("purged task: %s %+v", e.state(p1), ev)
	}
	left, _ := e.ops.DeadLetters(e.ctx, Scope{}, DeadFilter{})
	if !slices.Equal(ids(left), []string{p2}) {
		t.Errorf("left after purge: %v", ids(left))
	}
	// Unknown IDs are reported, and nothing changes.
	rep, err = e.ops.Purge(e.ctx, Scope{}, DeadFilter{IDs: []string{"nosuch"}}, "x", nil)
	if err != nil || rep.Done != 0 || len(rep.Failed) != 1 {
		t.Errorf("purge unknown: %+v %v", rep, err)
	}
	// Max bounds a bulk operation.
	rep, err = e.ops.Purge(e.ctx, Scope{}, DeadFilter{Max: 1}, "x", nil)
	if err != nil || rep.Done != 1 || e.stats("batch").DeadLettered != 0 {
		t.Errorf("purge max 1: %+v %v", rep, err)
	}
}

func TestOps_DeadLettersWithoutLedger(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	a := e.enqueue("batch", "", `{}`)
	b := e.enqueue("batch", "", `{}`)
	e.kill("batch", broker.ReasonUnknownKind)
	rep, err := e.ops.Replay(e.ctx, Scope{}, DeadFilter{IDs: []string{a}}, "x", nil)
	if err != nil || rep.Done != 1 {
		t.Fatalf("replay: %+v %v", rep, err)
	}
	rep, err = e.ops.Purge(e.ctx, Scope{}, DeadFilter{IDs: []string{b}}, "x", nil)
	if err != nil || rep.Done != 1 {
		t.Fatalf("purge: %+v %v", rep, err)
	}
	if s := e.stats("batch"); s.Ready != 1 || s.DeadLettered != 0 {
		t.Errorf("stats: %+v", s)
	}
	if _, err := e.ops.ReplaySandbox(e.ctx, Scope{}, "batch", a, "x"); !errors.Is(err, ErrNoLedger) {
		t.Errorf("sandbox without ledger: %v", err)
	}
}

func TestOps_Peek(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	var want []string
	for i := 0; i < 5; i++ {
		tenant := "acme"
		if i%2 == 1 {
			tenant = "globex"
		}
		want = append(want, e.enqueue("batch", tenant, fmt.Sprintf(`{"i":%d}`, i)))
	}
	ms, err := e.ops.Peek(e.ctx, Scope{}, "batch", 3)
	if err != nil || len(ms) != 3 {
		t.Fatalf("peek: %d %v", len(ms), err)
	}
	ms, _ = e.ops.Peek(e.ctx, Scope{Tenant: "globex"}, "batch", 0)
	if len(ms) != 2 || ms[0].Tenant != "globex" || ms[1].Tenant != "globex" {
		t.Errorf("scoped peek: %+v", ms)
	}
	for _, n := range []int{-1} {
		if _, err := e.ops.Peek(e.ctx, Scope{}, "batch", n); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("peek %d: %v", n, err)
		}
	}
	if _, err := e.ops.Peek(e.ctx, Scope{}, "bad lane", 1); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("peek bad lane: %v", err)
	}
	// Peeking spent no attempt and took nothing.
	ds, _ := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute})
	var got []string
	for _, d := range ds {
		got = append(got, d.ID)
		if d.Attempt != 1 {
			t.Errorf("%s: attempt %d after peeks", d.ID, d.Attempt)
		}
	}
	if !slices.Equal(sorted(got), sorted(want)) {
		t.Errorf("after peek: %v, want %v", got, want)
	}
}

func TestOps_Reviews(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	id := e.enqueue("batch", "acme", `{}`)
	ds, err := e.b.Receive(e.ctx, broker.ReceiveRequest{Lane: "batch", Max: 1, Lease: time.Minute})
	if err != nil || len(ds) != 1 || e.b.Ack(e.ctx, ds[0]) != nil {
		t.Fatalf("receive: %v", err)
	}
	e.transition(id, ledger.Running, "attempt_started")
	if _, err := e.L.Transition(e.ctx, ledger.TransitionRequest{ID: id, To: ledger.AwaitingReview, Reason: "await_review",
		Detail: `{"Reason":"big refund","Action":"refund 500"}`}); err != nil {
		t.Fatal(err)
	}
	if items, err := e.ops.Reviews(e.ctx, Scope{Tenant: "globex"}, 0); err != nil || len(items) != 0 {
		t.Errorf("another tenant's reviews: %+v %v", items, err)
	}
	items, err := e.ops.Reviews(e.ctx, Scope{Tenant: "acme"}, 0)
	if err != nil || len(items) != 1 || items[0].Reason != "big refund" {
		t.Fatalf("reviews: %+v %v", items, err)
	}
	for _, f := range []func() error{
		func() error { return e.ops.Claim(e.ctx, Scope{Tenant: "globex"}, id, "bob") },
		func() error { return e.ops.Approve(e.ctx, Scope{Tenant: "globex"}, id, "bob", "") },
		func() error { return e.ops.Reject(e.ctx, Scope{Tenant: "globex"}, id, "bob", "no") },
	} {
		if err := f(); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("out of scope: %v", err)
		}
	}
	if e.state(id) != ledger.AwaitingReview {
		t.Fatal("an out-of-scope call changed the task")
	}
	if err := e.ops.Claim(e.ctx, Scope{Tenant: "acme"}, id, "operator:bob"); err != nil {
		t.Fatal(err)
	}
	if err := e.ops.Approve(e.ctx, Scope{Tenant: "acme"}, id, "operator:bob", "ok"); err != nil {
		t.Fatal(err)
	}
	if e.state(id) != ledger.Queued || e.stats("batch").Ready != 1 {
		t.Errorf("approved: %s", e.state(id))
	}
	if _, err := e.ops.Reviews(e.ctx, Scope{}, -1); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("negative limit: %v", err)
	}
}

func TestOps_Ready(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	if err := e.ops.Ready(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.L.Close()
	if err := e.ops.Ready(e.ctx); err == nil {
		t.Error("ready with a closed ledger")
	}
	e.b.Close()
	if err := e.ops.Ready(e.ctx); err == nil {
		t.Error("ready with a closed broker")
	}
}

func TestOps_ReplaySandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	id := e.enqueue("batch", "acme", `{"doc":"d1"}`)
	e.kill("batch", broker.ReasonPermanent)
	if _, err := e.ops.ReplaySandbox(e.ctx, Scope{Tenant: "globex"}, "batch", id, "token:ci"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("another tenant's sandbox replay: %v", err)
	}
	if _, err := e.ops.ReplaySandbox(e.ctx, Scope{}, "batch", "nosuch", "token:ci"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("unknown dead letter: %v", err)
	}
	sid, err := e.ops.ReplaySandbox(e.ctx, Scope{Tenant: "acme"}, "", id, "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	copyTask, err := e.L.Get(e.ctx, sid)
	if err != nil || sid == id || string(copyTask.Args) != `{"doc":"d1"}` || copyTask.Tenant != "acme" {
		t.Errorf("sandbox copy: %+v %v", copyTask, err)
	}
	if s := e.stats("batch"); s.DeadLettered != 1 || s.Ready != 1 || e.state(id) != ledger.Dead {
		t.Errorf("after sandbox replay: %+v, original %s", s, e.state(id))
	}
}
