package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
)

// TestHandler_LaneEvents: pauses and resumes through the API are in the
// lanes' history with the token that made them, by lane and in all, newest
// first; read tokens may read it, tenant-scoped tokens and anonymous
// callers may not; bad input is a 400.
func TestHandler_LaneEvents(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	start := time.Now().Add(-time.Second)
	for _, p := range []string{"lanes/batch/pause", "lanes/batch/pause", "lanes/batch/resume", "lanes/interactive/pause"} {
		if r := e.Call("POST", p, admintest.AdminSecret, nil, nil); r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", p, r.Status, r.Body)
		}
	}
	if err := e.Client.PauseLane(e.Ctx, "batch", "operator:alice"); err != nil {
		t.Fatal(err)
	}
	type event struct {
		Lane   string    `json:"lane"`
		Action string    `json:"action"`
		Paused bool      `json:"paused"`
		Actor  string    `json:"actor"`
		At     time.Time `json:"at"`
	}
	get := func(path, token string) []event {
		t.Helper()
		r := e.Call("GET", path, token, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
		var body struct{ Events []event }
		if err := json.Unmarshal(r.Body, &body); err != nil || body.Events == nil {
			t.Fatalf("GET %s: %s (%v)", path, r.Body, err)
		}
		for _, ev := range body.Events {
			if ev.At.Before(start) || ev.At.After(time.Now().Add(time.Second)) || (ev.Action == "pause") != ev.Paused {
				t.Errorf("GET %s: event %+v", path, ev)
			}
		}
		return body.Events
	}
	summary := func(es []event) string {
		var parts []string
		for _, ev := range es {
			parts = append(parts, ev.Lane+" "+ev.Action+" "+ev.Actor)
		}
		return strings.Join(parts, ", ")
	}
	want := "batch pause operator:alice, interactive pause token:ops-admin, batch resume token:ops-admin, batch pause token:ops-admin"
	if got := summary(get("lane-events", admintest.ReadSecret)); got != want {
		t.Errorf("lane-events: %s\nwant %s", got, want)
	}
	if got := summary(get("lane-events?limit=2", admintest.AdminSecret)); got != "batch pause operator:alice, interactive pause token:ops-admin" {
		t.Errorf("lane-events?limit=2: %s", got)
	}
	if got := summary(get("lanes/batch/events", admintest.ReadSecret)); got != "batch pause operator:alice, batch resume token:ops-admin, batch pause token:ops-admin" {
		t.Errorf("lanes/batch/events: %s", got)
	}
	if got := get("lanes/scheduled/events", admintest.ReadSecret); len(got) != 0 {
		t.Errorf("lanes/scheduled/events: %+v", got)
	}
	// A lane no configuration knows any more keeps its history readable;
	// a lane that never existed is refused, as other lane lookups are.
	if err := e.Client.PauseLane(e.Ctx, "retired", "operator:bob"); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.ResumeLane(e.Ctx, "retired", "operator:bob"); err != nil {
		t.Fatal(err)
	}
	if got := summary(get("lanes/retired/events", admintest.ReadSecret)); got != "retired resume operator:bob, retired pause operator:bob" {
		t.Errorf("lanes/retired/events: %s", got)
	}

	for _, c := range []struct {
		path, token string
		status      int
		msg         string
	}{
		{"lane-events", "", http.StatusUnauthorized, "authentication required"},
		{"lanes/batch/events", "", http.StatusUnauthorized, "authentication required"},
		{"lane-events", admintest.EnqueueSecret, http.StatusForbidden, "role"},
		{"lane-events", admintest.GlobexSecret, http.StatusForbidden, "tenant-scoped"},
		{"lanes/batch/events", admintest.AcmeSecret, http.StatusForbidden, "tenant-scoped"},
		{"lane-events?limit=-1", admintest.ReadSecret, http.StatusBadRequest, "limit"},
		{"lane-events?limit=x", admintest.ReadSecret, http.StatusBadRequest, "limit"},
		{"lanes/-bad/events", admintest.ReadSecret, http.StatusBadRequest, "lane"},
		{"lanes/nosuch/events", admintest.ReadSecret, http.StatusBadRequest, "unknown lane"},
	} {
		r := e.Call("GET", c.path, c.token, nil, nil)
		if r.Status != c.status || !strings.Contains(string(r.Body), c.msg) {
			t.Errorf("GET %s with %q: %d %s, want %d containing %q", c.path, c.token, r.Status, r.Body, c.status, c.msg)
		}
		if c.status == http.StatusForbidden && strings.Contains(string(r.Body), "ops-admin") {
			t.Errorf("GET %s with %q leaks who paused: %s", c.path, c.token, r.Body)
		}
	}
}

// TestHTTP_UnknownLanes (issue 20, item 3): the ingestion endpoint refuses
// a lane nobody serves, for a tenant's token too, and creates no queue; so
// do the dead-letter listing and pause.
func TestHTTP_UnknownLanes(t *testing.T) {
	e := admintest.New(t, "")
	for _, tok := range []string{admintest.EnqueueSecret, admintest.AcmeSecret} {
		r := e.Ingest(tok, "k-"+tok[:4], map[string]any{"kind": "test.greet", "lane": "nosuch", "args": map[string]string{"name": "x"}})
		if r.Status != 400 || !strings.Contains(string(r.Body), `unknown lane \"nosuch\"`) {
			t.Errorf("ingest to an unknown lane: %d %s", r.Status, r.Body)
		}
	}
	if r := e.Call("GET", "dead?lane=nosuch", admintest.AdminSecret, nil, nil); r.Status != 400 || !strings.Contains(string(r.Body), "known lanes: batch") {
		t.Errorf("GET dead?lane=nosuch: %d %s", r.Status, r.Body)
	}
	if r := e.Call("POST", "lanes/nosuch/pause", admintest.AdminSecret, nil, nil); r.Status != 400 {
		t.Errorf("pause an unknown lane: %d %s", r.Status, r.Body)
	}
	if s, err := e.B.Stats(e.Ctx, "nosuch"); err != nil || s.Ready+s.DeadLettered != 0 {
		t.Errorf("the unknown lane: %+v %v", s, err)
	}
}
