package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/ledger"
)

type pingArgs struct{}

func (pingArgs) Kind() string { return "test.ping" }

// TestCLI_Servers: switchyard servers lists a running Server (registered
// by itself in the ledger) as live with its host, pid and lanes, and a
// server that stopped heartbeating as GONE, as a table and as JSON (the
// admin API's fields); once the Server stops it is no longer listed;
// without --ledger it is a usage error, and -h exits 0.
func TestCLI_Servers(t *testing.T) {
	e := newOpsEnv(t)
	common := []string{"--broker", e.url, "--ledger", e.dsn}
	code, out, errs := runCLI(t, append([]string{"servers"}, common...)...)
	if code != 0 || !strings.Contains(out, "no server is registered") {
		t.Fatalf("servers of a new ledger: %d %q %q", code, out, errs)
	}

	srv, err := switchyard.NewServer(e.b, &switchyard.ServerConfig{Ledger: e.L, WorkerID: "cli-worker-1",
		Slots: 4, PollWait: 50 * time.Millisecond, Lease: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := switchyard.Register(srv, func(ctx context.Context, _ *switchyard.Task[pingArgs]) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = srv.Stop(context.Background())
		}
	})
	if err := ledger.ServersOf(e.L).RegisterServer(e.ctx, ledger.Server{ID: "old-worker", Host: "lost-host", PID: 7,
		Lanes: []string{"batch"}, Slots: 2, Started: time.Now().Add(-time.Hour), Interval: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)

	var rows []admin.ServerInfo
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out, errs = runCLI(t, append([]string{"servers", "--json"}, common...)...)
		if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
			t.Fatalf("servers --json: %d %s %s", code, out, errs)
		}
		if len(rows) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(rows) != 2 || rows[0].ID != "cli-worker-1" || rows[1].ID != "old-worker" {
		t.Fatalf("servers --json = %+v", rows)
	}
	host, _ := os.Hostname()
	if r := rows[0]; r.State != "live" || r.Host != host || r.PID != os.Getpid() || r.Slots != 4 || r.Busy+r.Free != 4 ||
		len(r.Lanes) != 4 || r.Version == "" || r.IntervalMS != 1000 {
		t.Errorf("the running server = %+v", r)
	}
	if r := rows[1]; r.State != "gone" || r.Host != "lost-host" || r.Free != 2 {
		t.Errorf("the dead server = %+v", r)
	}
	// The raw JSON uses the admin API's field names.
	if !strings.Contains(out, `"heartbeat_age_ms"`) || !strings.Contains(out, `"state": "gone"`) {
		t.Errorf("servers --json fields:\n%s", out)
	}

	code, out, errs = runCLI(t, append([]string{"servers"}, common...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "SERVER") || !strings.Contains(lines[0], "HEARTBEAT") ||
		!strings.HasPrefix(lines[1], "cli-worker-1") || !strings.Contains(lines[1], "live") ||
		!strings.Contains(lines[1], "interactive,scheduled,batch,human-review") ||
		!strings.HasPrefix(lines[2], "old-worker") || !strings.Contains(lines[2], "GONE") || lines[3] != "1 live, 1 gone" {
		t.Fatalf("servers table: %d\n%s%s", code, out, errs)
	}

	stopped = true
	if err := srv.Stop(e.ctx); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCLI(t, append([]string{"servers", "--json"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].ID != "old-worker" {
		t.Fatalf("servers after Stop: %d %s", code, out)
	}

	if code, _, errs := runCLI(t, "servers", "--broker", e.url); code != 2 || !strings.Contains(errs, "--ledger") {
		t.Errorf("servers without --ledger: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, "servers", "-h"); code != 0 || !strings.Contains(errs, "usage: switchyard servers") {
		t.Errorf("servers -h: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, "servers", "extra", "--broker", e.url, "--ledger", e.dsn); code != 2 || !strings.Contains(errs, "unexpected argument") {
		t.Errorf("servers extra: %d %q", code, errs)
	}
}
