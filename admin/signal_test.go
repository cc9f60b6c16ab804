package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
)

type approvalArgs struct {
	Doc string `json:"doc"`
}

func (approvalArgs) Kind() string { return "test.approval" }

// The signal callback: a wrong token is a 404 and changes nothing; the
// right one resumes the task with its payload; used again it is a 409; the
// CSRF rules hold; the audit line names the token's hash, never the token.
// The bearer-token route signals by task and name, in the token's scope.
func TestHandler_SignalCallback(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	b, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	client, _ := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, Slots: 4, PollWait: 50 * time.Millisecond, Lease: 5 * time.Second})
	var mu sync.Mutex
	tokens, decisions := map[string]string{}, map[string]string{}
	admintest.Must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[approvalArgs]) error {
		tok, err := switchyard.EventToken(ctx, "decision", time.Hour, nil)
		if err != nil {
			return err
		}
		mu.Lock()
		tokens[tk.ID] = tok
		mu.Unlock()
		d, err := switchyard.AwaitEvent[map[string]string](ctx, "decision", time.Hour, nil)
		if err != nil {
			return err
		}
		mu.Lock()
		decisions[tk.ID] = d["verdict"]
		mu.Unlock()
		return nil
	}, nil))
	admintest.Must(t, srv.Start(ctx))
	defer srv.Stop(context.Background())
	ops, err := admin.New(admin.Config{Broker: b, Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	audit := &admintest.SyncBuffer{}
	h, err := admin.NewHandler(ops, admin.HandlerConfig{Tokens: admintest.Tokens(), AuditLogger: slog.New(slog.NewTextHandler(audit, nil)),
		Logger: slog.New(slog.NewTextHandler(audit, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)

	post := func(path, secret, ctype, body string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/api/v1/"+path, bytes.NewBufferString(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(out)
	}
	parked := func(id string) {
		t.Helper()
		waitUntil(t, func() bool {
			tk, err := L.Get(ctx, id)
			return err == nil && tk.State == ledger.AwaitingEvent
		})
	}

	a, _ := client.Enqueue(ctx, approvalArgs{Doc: "a"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	parked(a.ID)
	mu.Lock()
	tok := tokens[a.ID]
	mu.Unlock()

	if st, body := post("signals/wrong-token", "", "application/json", `{"verdict":"yes"}`, nil); st != http.StatusNotFound {
		t.Errorf("wrong token: %d %s", st, body)
	}
	if st, _ := post("signals/"+tok, "", "text/plain", `{"verdict":"yes"}`, nil); st != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d", st)
	}
	if st, _ := post("signals/"+tok, "", "application/json", `{"verdict":"yes"}`, map[string]string{"Sec-Fetch-Site": "cross-site"}); st != http.StatusForbidden {
		t.Errorf("cross-site: %d", st)
	}
	if st, _ := post("signals/"+tok, "", "application/json", `{not json`, nil); st != http.StatusBadRequest {
		t.Errorf("not JSON: %d", st)
	}
	parked(a.ID) // nothing refused changed the task
	if st, body := post("signals/"+tok, "", "application/json", `{"verdict":"yes"}`, nil); st != http.StatusOK || !strings.Contains(body, `"resumed":true`) {
		t.Fatalf("signal: %d %s", st, body)
	}
	if st, body := post("signals/"+tok, "", "application/json", `{"verdict":"no"}`, nil); st != http.StatusConflict {
		t.Errorf("reused token: %d %s", st, body)
	}
	waitUntil(t, func() bool {
		tk, err := L.Get(ctx, a.ID)
		return err == nil && tk.State == ledger.Completed
	})
	mu.Lock()
	if decisions[a.ID] != "yes" {
		t.Errorf("decision %q, want yes", decisions[a.ID])
	}
	mu.Unlock()
	if strings.Contains(audit.String(), tok) {
		t.Error("the audit log holds the token")
	}
	if !strings.Contains(audit.String(), "token_sha256") || !strings.Contains(audit.String(), a.ID) {
		t.Errorf("audit: %s", audit.String())
	}

	// By task and name with a bearer token: admin role, tenant scope.
	bt, _ := client.Enqueue(ctx, approvalArgs{Doc: "b"}, &switchyard.EnqueueOpts{Lane: "interactive", Tenant: "acme"})
	parked(bt.ID)
	path := "tasks/" + bt.ID + "/signals/decision"
	for _, c := range []struct {
		secret string
		want   int
	}{{admintest.ReadSecret, http.StatusForbidden}, {admintest.GlobexSecret, http.StatusForbidden}, {"", http.StatusUnauthorized}} {
		if st, body := post(path, c.secret, "application/json", `{"verdict":"x"}`, nil); st != c.want {
			t.Errorf("signal with %q: %d %s, want %d", c.secret, st, body, c.want)
		}
	}
	if st, body := post("tasks/"+bt.ID+"/signals/other", admintest.AdminSecret, "application/json", `{}`, nil); st != http.StatusNotFound {
		t.Errorf("unknown wait name: %d %s", st, body)
	}
	st, body := post(path, admintest.AcmeSecret, "application/json", `{"verdict":"ok"}`, nil)
	var out map[string]any
	_ = json.Unmarshal([]byte(body), &out)
	if st != http.StatusOK || out["resumed"] != true || out["id"] != bt.ID {
		t.Fatalf("acme signal: %d %s", st, body)
	}
	waitUntil(t, func() bool {
		tk, err := L.Get(ctx, bt.ID)
		return err == nil && tk.State == ledger.Completed
	})

	// A parked task cancelled over HTTP ends cancelled once; its token is
	// then refused (409) and changes nothing; a second cancel is a 409.
	ct, _ := client.Enqueue(ctx, approvalArgs{Doc: "c"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	parked(ct.ID)
	mu.Lock()
	ctok := tokens[ct.ID]
	mu.Unlock()
	if st, body := post("tasks/"+ct.ID+"/cancel", admintest.AdminSecret, "application/json", `{"reason":"no longer needed"}`, nil); st != http.StatusOK || !strings.Contains(body, `"cancelled"`) {
		t.Fatalf("cancel a parked task: %d %s", st, body)
	}
	if st, body := post("signals/"+ctok, "", "application/json", `{"verdict":"late"}`, nil); st != http.StatusConflict {
		t.Errorf("signal to a cancelled task: %d %s, want 409", st, body)
	}
	if st, body := post("tasks/"+ct.ID+"/cancel", admintest.AdminSecret, "application/json", `{}`, nil); st != http.StatusConflict {
		t.Errorf("second cancel: %d %s, want 409", st, body)
	}
	evs, err := L.Events(ctx, ct.ID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.To == ledger.Cancelled {
			n++
		}
	}
	if tk, _ := L.Get(ctx, ct.ID); tk.State != ledger.Cancelled || n != 1 {
		t.Errorf("cancelled parked task: %s, %d moves to cancelled", tk.State, n)
	}
	mu.Lock()
	if _, ok := decisions[ct.ID]; ok {
		t.Error("the cancelled task resumed")
	}
	mu.Unlock()
}
