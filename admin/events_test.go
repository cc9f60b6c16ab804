package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/ledger"
)

type sseEvent struct {
	id, event string
	data      map[string]any
}

// readSSE reads Server-Sent Events from GET events until stop says so or
// the stream ends, and returns them.
func readSSE(t *testing.T, url, secret, lastID string, stop func(sseEvent) bool) (int, []sseEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return res.StatusCode, nil
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event == "" {
				continue
			}
			out = append(out, cur)
			if cur.event == "end" || stop(cur) {
				return res.StatusCode, out
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[6:]), &cur.data); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
		}
	}
	return res.StatusCode, out
}

// GET tasks/{id}/events streams the task's state changes, progress and
// chunks as Server-Sent Events; Last-Event-ID resumes after the last one
// received, with nothing lost or repeated; the stream ends with the task.
// Tenant scope, roles and bad offsets are refused like the other routes.
func TestHandler_EventsSSE(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	res, err := e.Client.Enqueue(e.Ctx, admintest.RefundArgs{Order: "A-7", Amount: 900}, &switchyard.EnqueueOpts{Lane: "interactive", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		info, err := e.Client.Task(e.Ctx, res.ID)
		return err == nil && info.Task.State == ledger.AwaitingReview
	})
	appendEntries := func(es ...ledger.StreamEntry) {
		if _, err := e.L.AppendStream(e.Ctx, res.ID, 1, es); err != nil {
			t.Fatal(err)
		}
	}
	appendEntries(ledger.StreamEntry{Kind: ledger.StreamProgress, Fraction: 0.5, Message: "half"},
		ledger.StreamEntry{Kind: ledger.StreamChunk, Data: []byte("one ")},
		ledger.StreamEntry{Kind: ledger.StreamChunk, Data: []byte("two ")})
	url := e.API + "tasks/" + res.ID + "/events"

	status, first := readSSE(t, url, admintest.AdminSecret, "", func(ev sseEvent) bool { return ev.event == "chunk" && ev.data["text"] == "two " })
	if status != http.StatusOK {
		t.Fatalf("events: %d", status)
	}
	var kinds []string
	for _, ev := range first {
		kinds = append(kinds, ev.event)
	}
	if got := strings.Join(kinds, ","); got != "state,state,state,progress,chunk,chunk" {
		t.Fatalf("first connection: %s", got)
	}
	if first[2].data["state"] != "awaiting_review" || first[3].data["fraction"] != 0.5 || first[3].data["message"] != "half" {
		t.Errorf("events: %+v", first)
	}
	last := first[len(first)-1].id

	appendEntries(ledger.StreamEntry{Kind: ledger.StreamChunk, Data: []byte("three")}, ledger.StreamEntry{Kind: ledger.StreamChunk, Data: []byte{0xff, 0x00}})
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = e.Client.Reject(e.Ctx, res.ID, "alice", "not this time")
	}()
	_, second := readSSE(t, url, admintest.AdminSecret, last, func(sseEvent) bool { return false })
	kinds = kinds[:0]
	for _, ev := range second {
		kinds = append(kinds, ev.event)
	}
	if got := strings.Join(kinds, ","); got != "chunk,chunk,state,end" {
		t.Fatalf("after Last-Event-ID %s: %s (%+v)", last, got, second)
	}
	if second[0].data["text"] != "three" || second[1].data["base64"] != "/wA=" || second[2].data["state"] != "rejected" {
		t.Errorf("resumed events: %+v", second)
	}
	// The same through ?from=, and a read-only token sees sizes, not text.
	_, viaQuery := readSSE(t, url+"?from="+last, admintest.ReadSecret, "", func(sseEvent) bool { return false })
	if len(viaQuery) != 4 || viaQuery[0].data["text"] != nil || viaQuery[0].data["bytes"] != float64(5) {
		t.Errorf("read-only from=%s: %+v", last, viaQuery)
	}

	for _, c := range []struct {
		name, url, secret, last string
		want                    int
	}{
		{"another tenant", url, admintest.GlobexSecret, "", http.StatusNotFound},
		{"the task's tenant", url, admintest.AcmeSecret, "", http.StatusOK},
		{"no token", url, "", "", http.StatusUnauthorized},
		{"unknown task", e.API + "tasks/no-such-task/events", admintest.AdminSecret, "", http.StatusNotFound},
		{"bad Last-Event-ID", url, admintest.AdminSecret, "x1", http.StatusBadRequest},
		{"negative offset", url, admintest.AdminSecret, "-3", http.StatusBadRequest},
		{"two offsets", url + "?from=1", admintest.AdminSecret, "2", http.StatusBadRequest},
	} {
		if got, _ := readSSE(t, c.url, c.secret, c.last, func(sseEvent) bool { return true }); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// GET tasks shows the latest progress report of running tasks.
func TestHandler_TasksProgress(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	task, _, err := e.L.Create(e.Ctx, &ledger.Task{Kind: "test.other", Lane: "batch", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.L.Transition(e.Ctx, ledger.TransitionRequest{ID: task.ID, To: ledger.Running, Reason: "attempt_started"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []float64{0.2, 0.7} {
		if _, err := e.L.AppendStream(e.Ctx, task.ID, 1, []ledger.StreamEntry{{Kind: ledger.StreamProgress, Fraction: f, Message: "step"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, secret := range []string{admintest.ReadSecret, admintest.AcmeSecret} {
		r := e.Call("GET", "tasks?state=running", secret, nil, nil)
		if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"progress":{"fraction":0.7,"message":"step"`) {
			t.Errorf("GET tasks: %d %s", r.Status, r.Body)
		}
	}
	if r := e.Call("GET", "tasks?state=running", admintest.GlobexSecret, nil, nil); strings.Contains(string(r.Body), task.ID) {
		t.Errorf("another tenant sees the task: %s", r.Body)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
