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
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
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
	logs := &admintest.SyncBuffer{}
	h, err := admin.NewHandler(ops, admin.HandlerConfig{Tokens: admintest.Tokens(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
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
	e := admintest.New(t, "")
	if r := e.Call("GET", e.Server.URL+"/metrics", admintest.GlobexSecret, nil, nil); r.Status != http.StatusForbidden {
		t.Errorf("scoped /metrics: %d %s, want 403", r.Status, r.Body)
	}
	if r := e.Call("GET", e.Server.URL+"/metrics", admintest.ReadSecret, nil, nil); r.Status != http.StatusOK {
		t.Errorf("/metrics: %d %s", r.Status, r.Body)
	}
	if r := e.Call("POST", "lanes/batch/pause", admintest.AdminSecret, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.Status, r.Body)
	}
	r := e.Call("GET", "lanes", admintest.GlobexSecret, nil, nil)
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"paused":true`) || strings.Contains(string(r.Body), "ops-admin") {
		t.Errorf("scoped GET lanes: %d %s, want batch paused without who", r.Status, r.Body)
	}
	if r := e.Call("GET", "lanes", admintest.ReadSecret, nil, nil); !strings.Contains(string(r.Body), `"paused_by":"token:ops-admin"`) {
		t.Errorf("unscoped GET lanes lacks paused_by: %s", r.Body)
	}
}

// Ingestion names the token in the task's event log, and refuses a fair
// lane's shard.
func TestHandler_IngestionActorAndLanes(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	r := e.Ingest(admintest.EnqueueSecret, "actor-1", map[string]any{"kind": "test.greet", "args": map[string]string{"name": "ada"}})
	if r.Status != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	evs, err := e.L.Events(e.Ctx, id)
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
	if r := e.Ingest(admintest.EnqueueSecret, "actor-1", map[string]any{"kind": "test.greet", "args": map[string]string{"name": "ada"}}); r.Status != http.StatusAccepted || r.JSON(t)["duplicate"] != true {
		t.Fatalf("duplicate: %d %s", r.Status, r.Body)
	}
	evs, _ = e.L.Events(e.Ctx, id)
	n = 0
	for _, ev := range evs {
		if ev.Reason == "submitted" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d submitted events after a duplicate, want 1", n)
	}
	r = e.Ingest(admintest.EnqueueSecret, "shard-1", map[string]any{"kind": "test.flaky", "lane": "batch" + broker.FairShardSep + "3", "args": map[string]string{"item": "x"}})
	if r.Status != http.StatusBadRequest || !strings.Contains(r.ErrText(t), "shard") {
		t.Errorf("a shard lane: %d %s, want 400", r.Status, r.Body)
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
	e := admintest.New(t, "")
	h, err := admin.NewHandler(e.Ops, admin.HandlerConfig{Tokens: admintest.Tokens(), RequestTimeout: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	req, _ := http.NewRequest("GET", ts.URL+"/api/v1/lanes", nil)
	req.Header.Set("Authorization", "Bearer "+admintest.ReadSecret)
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
	if _, err := admin.NewHandler(e.Ops, admin.HandlerConfig{Tokens: admintest.Tokens(), Logger: warn}); !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "AuditLogger") {
		t.Errorf("a Warn-level logger as the audit log: %v", err)
	}
	audit := &admintest.SyncBuffer{}
	h, err = admin.NewHandler(e.Ops, admin.HandlerConfig{Tokens: admintest.Tokens(), Logger: warn, AuditLogger: slog.New(slog.NewTextHandler(audit, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts2 := httptest.NewServer(h)
	t.Cleanup(ts2.Close)
	req, _ = http.NewRequest("POST", ts2.URL+"/api/v1/lanes/batch/resume", nil)
	req.Header.Set("Authorization", "Bearer "+admintest.AdminSecret)
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
