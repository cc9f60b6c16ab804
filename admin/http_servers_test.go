package admin_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestHandler_Servers: GET /api/v1/servers lists the running Server of
// the test environment (registered by itself in the ledger) as live with
// its host, pid, lanes and slots, and a server that stopped heartbeating
// as gone; its lanes become known lanes; read tokens may list, tenant
// tokens, enqueue tokens and anonymous callers may not.
func TestHandler_Servers(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	reg := ledger.ServersOf(e.L)
	if reg == nil {
		t.Fatal("the SQLite ledger has no server registry")
	}
	// A server that died: its last heartbeat is older than three of its
	// (1ms) intervals by the time the list is read.
	if err := reg.RegisterServer(e.Ctx, ledger.Server{ID: "dead-1", Host: "gone-host", PID: 99, Lanes: []string{"gpu"},
		Slots: 2, Busy: 1, Version: "v0.9.0", Started: time.Now().Add(-time.Hour), Interval: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)

	var body struct {
		Servers    []admin.ServerInfo `json:"servers"`
		Live, Gone int
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := e.Call("GET", "servers", admintest.ReadSecret, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET servers: %d %s", r.Status, r.Body)
		}
		body.Servers = nil
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatalf("GET servers: %s (%v)", r.Body, err)
		}
		if len(body.Servers) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test Server's record did not appear: %+v", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	host, _ := os.Hostname()
	var live, gone *admin.ServerInfo
	for i := range body.Servers {
		if body.Servers[i].ID == "dead-1" {
			gone = &body.Servers[i]
		} else {
			live = &body.Servers[i]
		}
	}
	if live == nil || gone == nil || body.Live != 1 || body.Gone != 1 {
		t.Fatalf("servers = %+v", body)
	}
	if live.State != admin.ServerLive || live.Host != host || live.PID != os.Getpid() || live.Slots != 4 ||
		live.Busy+live.Free != 4 || live.Version == "" || !slices.Contains(live.Lanes, "interactive") ||
		live.HeartbeatAgeMS < 0 || live.IntervalMS <= 0 || live.Started.IsZero() {
		t.Errorf("the running server: %+v", live)
	}
	if gone.State != admin.ServerGone || gone.Host != "gone-host" || gone.Free != 1 || gone.Version != "v0.9.0" ||
		!slices.Equal(gone.Lanes, []string{"gpu"}) {
		t.Errorf("the dead server: %+v", gone)
	}

	// The lanes registered servers serve are known lanes.
	known, err := e.Ops.KnownLanes(e.Ctx)
	if err != nil || !slices.Contains(known, "gpu") {
		t.Errorf("KnownLanes = %v, %v; want gpu (served by a registered server)", known, err)
	}
	if r := e.Call("GET", "dead?lane=gpu", admintest.ReadSecret, nil, nil); r.Status != http.StatusOK {
		t.Errorf("GET dead?lane=gpu: %d %s; a registered server's lane must be known", r.Status, r.Body)
	}
	if r := e.Call("GET", "dead?lane=nosuchlane", admintest.ReadSecret, nil, nil); r.Status != http.StatusBadRequest {
		t.Errorf("GET dead?lane=nosuchlane: %d %s; want 400", r.Status, r.Body)
	}

	for _, c := range []struct {
		token  string
		status int
		msg    string
	}{
		{"", http.StatusUnauthorized, "authentication required"},
		{admintest.EnqueueSecret, http.StatusForbidden, "role"},
		{admintest.GlobexSecret, http.StatusForbidden, "tenant-scoped"},
		{admintest.AcmeSecret, http.StatusForbidden, "tenant-scoped"},
	} {
		r := e.Call("GET", "servers", c.token, nil, nil)
		if r.Status != c.status || !strings.Contains(string(r.Body), c.msg) || strings.Contains(string(r.Body), "gone-host") {
			t.Errorf("GET servers with %q: %d %s, want %d containing %q", c.token, r.Status, r.Body, c.status, c.msg)
		}
	}
}

// TestOps_ServersNoLedger: without a ledger, the fleet is ErrNoLedger
// (a 501 over HTTP saying a ledger is needed), not an empty list.
func TestOps_ServersNoLedger(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(t.Context(), "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ops, err := admin.New(admin.Config{Broker: b})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ops.Servers(t.Context()); !errors.Is(err, admin.ErrNoLedger) {
		t.Fatalf("Servers without a ledger: %v, want ErrNoLedger", err)
	}
	h, err := admin.NewHandler(ops, admin.HandlerConfig{Tokens: admintest.Tokens()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	req, _ := http.NewRequest("GET", ts.URL+"/api/v1/servers", nil)
	req.Header.Set("Authorization", "Bearer "+admintest.ReadSecret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ Error string }
	_ = json.NewDecoder(res.Body).Decode(&out)
	if res.StatusCode != http.StatusNotImplemented || !strings.Contains(out.Error, "ledger") {
		t.Errorf("GET servers without a ledger: %d %q, want 501 naming the ledger", res.StatusCode, out.Error)
	}
}
