package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// /readyz answers anyone: it says which side is down, never the error
// text (a DSN's user, host or file); the log has the detail.
func TestHandler_ReadyzHidesDetail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "secret-ledger-name.db")
	L, err := ledger.Open(ctx, "sqlite://"+dbPath)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Open(ctx, "mem://readyz-"+strings.ReplaceAll(t.Name(), "/", "-"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ops, err := admin.New(admin.Config{Broker: b, Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	L.Close() // the ledger is down
	logs := &syncBuffer{}
	h, err := admin.NewHandler(ops, admin.HandlerConfig{Tokens: testTokens(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	res, err := http.Get(ts.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "the ledger does not answer") {
		t.Fatalf("readyz: %d %s", res.StatusCode, body)
	}
	if strings.Contains(string(body), "closed") || strings.Contains(string(body), "sqlite") || strings.Contains(string(body), "secret-ledger-name") {
		t.Errorf("readyz leaks the error: %s", body)
	}
	if !strings.Contains(logs.String(), "admin: not ready") {
		t.Errorf("the detail is not logged: %s", logs.String())
	}
}

// Tenant-scoped tokens read neither /metrics (every tenant's counts) nor
// who paused a lane (another token's name).
func TestHandler_TenantScopeLeaks(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	if r := e.call("GET", e.ts.URL+"/metrics", globexSecret, nil, nil); r.status != http.StatusForbidden {
		t.Errorf("scoped /metrics: %d %s, want 403", r.status, r.body)
	}
	if r := e.call("GET", e.ts.URL+"/metrics", readSecret, nil, nil); r.status != http.StatusOK {
		t.Errorf("/metrics: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "lanes/batch/pause", adminSecret, nil, nil); r.status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	r := e.call("GET", "lanes", globexSecret, nil, nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"paused":true`) || strings.Contains(string(r.body), "ops-admin") {
		t.Errorf("scoped GET lanes: %d %s, want batch paused without who", r.status, r.body)
	}
	if r := e.call("GET", "lanes", readSecret, nil, nil); !strings.Contains(string(r.body), `"paused_by":"token:ops-admin"`) {
		t.Errorf("unscoped GET lanes lacks paused_by: %s", r.body)
	}
}

// Ingestion names the token in the task's event log, and refuses a fair
// lane's shard.
func TestHandler_IngestionActorAndLanes(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	r := e.ingest(enqueueSecret, "actor-1", map[string]any{"kind": "test.greet", "args": map[string]string{"name": "ada"}})
	if r.status != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	evs, err := e.L.Events(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Reason == "submitted" && ev.Actor == "token:producer" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d submitted events by token:producer in %+v, want 1", n, evs)
	}
	// The same key again: a duplicate, no second event.
	if r := e.ingest(enqueueSecret, "actor-1", map[string]any{"kind": "test.greet", "args": map[string]string{"name": "ada"}}); r.status != http.StatusAccepted || r.json(t)["duplicate"] != true {
		t.Fatalf("duplicate: %d %s", r.status, r.body)
	}
	evs, _ = e.L.Events(e.ctx, id)
	n = 0
	for _, ev := range evs {
		if ev.Reason == "submitted" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d submitted events after a duplicate, want 1", n)
	}
	r = e.ingest(enqueueSecret, "shard-1", map[string]any{"kind": "test.flaky", "lane": "batch" + broker.FairShardSep + "3", "args": map[string]string{"item": "x"}})
	if r.status != http.StatusBadRequest || !strings.Contains(r.errText(t), "shard") {
		t.Errorf("a shard lane: %d %s, want 400", r.status, r.body)
	}
}

// KindSpec.Lanes limits the lanes a request may name.
func TestOps_EnqueueLaneAllowList(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(context.Background(), "mem://lanes-"+strings.ReplaceAll(t.Name(), "/", "-"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ops, err := admin.New(admin.Config{Broker: b, Kinds: map[string]admin.KindSpec{"k": {Lane: "interactive", Lanes: []string{"batch"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for lane, ok := range map[string]bool{"": true, "interactive": true, "batch": true, "bulk": false} {
		_, err := ops.Enqueue(ctx, admin.Scope{}, admin.EnqueueRequest{Kind: "k", Lane: lane})
		if ok != (err == nil) || (!ok && !errors.Is(err, broker.ErrInvalid)) {
			t.Errorf("lane %q: %v", lane, err)
		}
	}
	if _, err := admin.New(admin.Config{Broker: b, Kinds: map[string]admin.KindSpec{"k": {Lanes: []string{"no such"}}}}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("a malformed allowed lane: %v", err)
	}
}

// API calls have a deadline; an audit logger that drops Info is refused.
func TestHandler_TimeoutsAndAuditLogger(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	h, err := admin.NewHandler(e.ops, admin.HandlerConfig{Tokens: testTokens(), RequestTimeout: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	req, _ := http.NewRequest("GET", ts.URL+"/api/v1/lanes", nil)
	req.Header.Set("Authorization", "Bearer "+readSecret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]string
	_ = json.NewDecoder(res.Body).Decode(&body)
	res.Body.Close()
	if res.StatusCode != http.StatusGatewayTimeout {
		t.Errorf("GET lanes past its deadline: %d %v, want 504", res.StatusCode, body)
	}

	warn := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if _, err := admin.NewHandler(e.ops, admin.HandlerConfig{Tokens: testTokens(), Logger: warn}); !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "AuditLogger") {
		t.Errorf("a Warn-level logger as the audit log: %v", err)
	}
	audit := &syncBuffer{}
	h, err = admin.NewHandler(e.ops, admin.HandlerConfig{Tokens: testTokens(), Logger: warn, AuditLogger: slog.New(slog.NewTextHandler(audit, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts2 := httptest.NewServer(h)
	t.Cleanup(ts2.Close)
	req, _ = http.NewRequest("POST", ts2.URL+"/api/v1/lanes/batch/resume", nil)
	req.Header.Set("Authorization", "Bearer "+adminSecret)
	req.Header.Set("Content-Type", "application/json")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(audit.String(), `msg="admin action"`) || !strings.Contains(audit.String(), "token=ops-admin") {
		t.Errorf("resume: %d; audit log %q", res.StatusCode, audit.String())
	}
}
