package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHandler_LaneEvents: pauses and resumes through the API are in the
// lanes' history with the token that made them, by lane and in all, newest
// first; read tokens may read it, tenant-scoped tokens and anonymous
// callers may not; bad input is a 400.
func TestHandler_LaneEvents(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	start := time.Now().Add(-time.Second)
	for _, p := range []string{"lanes/batch/pause", "lanes/batch/pause", "lanes/batch/resume", "lanes/interactive/pause"} {
		if r := e.call("POST", p, adminSecret, nil, nil); r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", p, r.status, r.body)
		}
	}
	if err := e.client.PauseLane(e.ctx, "batch", "operator:alice"); err != nil {
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
		r := e.call("GET", path, token, nil, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		var body struct{ Events []event }
		if err := json.Unmarshal(r.body, &body); err != nil || body.Events == nil {
			t.Fatalf("GET %s: %s (%v)", path, r.body, err)
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
	if got := summary(get("lane-events", readSecret)); got != want {
		t.Errorf("lane-events: %s\nwant %s", got, want)
	}
	if got := summary(get("lane-events?limit=2", adminSecret)); got != "batch pause operator:alice, interactive pause token:ops-admin" {
		t.Errorf("lane-events?limit=2: %s", got)
	}
	if got := summary(get("lanes/batch/events", readSecret)); got != "batch pause operator:alice, batch resume token:ops-admin, batch pause token:ops-admin" {
		t.Errorf("lanes/batch/events: %s", got)
	}
	if got := get("lanes/scheduled/events", readSecret); len(got) != 0 {
		t.Errorf("lanes/scheduled/events: %+v", got)
	}

	for _, c := range []struct {
		path, token string
		status      int
		msg         string
	}{
		{"lane-events", "", http.StatusUnauthorized, "authentication required"},
		{"lanes/batch/events", "", http.StatusUnauthorized, "authentication required"},
		{"lane-events", enqueueSecret, http.StatusForbidden, "role"},
		{"lane-events", globexSecret, http.StatusForbidden, "tenant-scoped"},
		{"lanes/batch/events", acmeSecret, http.StatusForbidden, "tenant-scoped"},
		{"lane-events?limit=-1", readSecret, http.StatusBadRequest, "limit"},
		{"lane-events?limit=x", readSecret, http.StatusBadRequest, "limit"},
		{"lanes/-bad/events", readSecret, http.StatusBadRequest, "lane"},
	} {
		r := e.call("GET", c.path, c.token, nil, nil)
		if r.status != c.status || !strings.Contains(string(r.body), c.msg) {
			t.Errorf("GET %s with %q: %d %s, want %d containing %q", c.path, c.token, r.status, r.body, c.status, c.msg)
		}
		if c.status == http.StatusForbidden && strings.Contains(string(r.body), "ops-admin") {
			t.Errorf("GET %s with %q leaks who paused: %s", c.path, c.token, r.body)
		}
	}
}

// TestHTTP_UnknownLanes (issue 20, item 3): the ingestion endpoint refuses
// a lane nobody serves, for a tenant's token too, and creates no queue; so
// do the dead-letter listing and pause.
func TestHTTP_UnknownLanes(t *testing.T) {
	e := newTestEnv(t, "")
	for _, tok := range []string{enqueueSecret, acmeSecret} {
		r := e.ingest(tok, "k-"+tok[:4], map[string]any{"kind": "test.greet", "lane": "nosuch", "args": map[string]string{"name": "x"}})
		if r.status != 400 || !strings.Contains(string(r.body), `unknown lane \"nosuch\"`) {
			t.Errorf("ingest to an unknown lane: %d %s", r.status, r.body)
		}
	}
	if r := e.call("GET", "dead?lane=nosuch", adminSecret, nil, nil); r.status != 400 || !strings.Contains(string(r.body), "known lanes: batch") {
		t.Errorf("GET dead?lane=nosuch: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "lanes/nosuch/pause", adminSecret, nil, nil); r.status != 400 {
		t.Errorf("pause an unknown lane: %d %s", r.status, r.body)
	}
	if s, err := e.b.Stats(e.ctx, "nosuch"); err != nil || s.Ready+s.DeadLettered != 0 {
		t.Errorf("the unknown lane: %+v %v", s, err)
	}
}
