package admin_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestHandler_Ingestion is the acceptance for ingestion: one key,
// one task; bad requests get 400 and enqueue nothing; a tenant-scoped
// token cannot read another tenant's task.
func TestHandler_Ingestion(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	body := map[string]any{"kind": "test.greet", "args": map[string]string{"name": "ada"}, "metadata": map[string]string{"source": "test"}}

	r1 := e.Ingest(admintest.EnqueueSecret, "order-1", body)
	if r1.Status != http.StatusAccepted {
		t.Fatalf("first ingest: %d %s", r1.Status, r1.Body)
	}
	j1 := r1.JSON(t)
	id, _ := j1["id"].(string)
	if id == "" || j1["duplicate"] != false || j1["status_url"] != "/api/v1/tasks/"+id+"/status" {
		t.Fatalf("first ingest answered %s", r1.Body)
	}
	r2 := e.Ingest(admintest.EnqueueSecret, "order-1", body)
	j2 := r2.JSON(t)
	if r2.Status != http.StatusAccepted || j2["id"] != id || j2["duplicate"] != true {
		t.Fatalf("second ingest with the same key: %d %s, want 202 with id %s and duplicate", r2.Status, r2.Body, id)
	}

	// The same key with another body: 422, nothing enqueued; the same body
	// spelt differently is the same request.
	for name, other := range map[string]any{
		"other args":     map[string]any{"kind": "test.greet", "args": map[string]string{"name": "bob"}, "metadata": map[string]string{"source": "test"}},
		"other metadata": map[string]any{"kind": "test.greet", "args": map[string]string{"name": "ada"}},
		"other lane":     map[string]any{"kind": "test.greet", "args": map[string]string{"name": "ada"}, "metadata": map[string]string{"source": "test"}, "lane": "batch"},
	} {
		r := e.Ingest(admintest.EnqueueSecret, "order-1", other)
		if r.Status != http.StatusUnprocessableEntity || !strings.Contains(r.ErrText(t), "Idempotency-Key") {
			t.Errorf("%s with a used key: %d %s, want 422", name, r.Status, r.Body)
		}
	}
	r3 := e.Ingest(admintest.EnqueueSecret, "order-1", `{"metadata": {"source": "test"}, "args": { "name" : "ada" }, "kind": "test.greet"}`)
	if j3 := r3.JSON(t); r3.Status != http.StatusAccepted || j3["id"] != id || j3["duplicate"] != true {
		t.Errorf("the same body spelt differently: %d %s, want 202 with id %s", r3.Status, r3.Body, id)
	}

	// Fetch later: the status endpoint, with the enqueue token.
	var st map[string]any
	for i := 0; i < 1500; i++ {
		r := e.Call("GET", "tasks/"+id+"/status", admintest.EnqueueSecret, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("status: %d %s", r.Status, r.Body)
		}
		if st = r.JSON(t); st["state"] == "completed" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st["state"] != "completed" || st["done"] != true {
		t.Fatalf("status never completed: %v", st)
	}
	if res, _ := st["result"].(map[string]any); res["greeting"] != "hello ada" {
		t.Errorf("status result = %v, want the handler's greeting", st["result"])
	}
	if as, _ := st["attempts"].([]any); len(as) != 1 {
		t.Errorf("status attempts = %v, want 1", st["attempts"])
	}
	if n, _ := e.Totals(); n != 1 {
		t.Fatalf("%d tasks in the ledger after two ingests with one key, want 1", n)
	}

	// Bad requests: 400 with a clear message, nothing enqueued.
	bad := []struct {
		name, key string
		body      any
		want      string
	}{
		{"missing key", "", body, "Idempotency-Key header is required"},
		{"malformed JSON", "bad-1", `{"kind": "test.greet" "args": {}}`, "not valid JSON"},
		{"truncated", "bad-2", `{"kind": "test.greet"`, "truncated"},
		{"not an object", "bad-3", `[1, 2]`, "must be a JSON object"},
		{"unknown field", "bad-4", `{"kind": "test.greet", "args": {"name": "x"}, "colour": "red"}`, `unknown field "colour"`},
		{"unknown kind", "bad-5", `{"kind": "test.nope", "args": {}}`, `unknown kind "test.nope"`},
		{"no kind", "bad-6", `{"args": {}}`, "kind is required"},
		{"args fail validation", "bad-7", `{"kind": "test.greet", "args": {}}`, "name is required"},
		{"args not an object", "bad-8", `{"kind": "test.greet", "args": [1]}`, "must be a JSON object"},
		{"bad run_at", "bad-9", `{"kind": "test.greet", "args": {"name": "x"}, "run_at": "tomorrow"}`, "RFC 3339"},
		{"bad delay", "bad-10", `{"kind": "test.greet", "args": {"name": "x"}, "delay": "soon"}`, "not a duration"},
		{"two delays", "bad-11", `{"kind": "test.greet", "args": {"name": "x"}, "delay": "1s", "delay_ms": 5}`, "not both"},
		{"wrong type", "bad-12", `{"kind": "test.greet", "args": {"name": "x"}, "max_attempts": "3"}`, `field "max_attempts"`},
		{"trailing data", "bad-13", `{"kind": "test.greet", "args": {"name": "x"}} {}`, "data after the JSON object"},
		{"empty body", "bad-14", ``, "body is empty"},
		{"bad lane", "bad-15", `{"kind": "test.greet", "args": {"name": "x"}, "lane": "no spaces allowed"}`, "lane"},
	}
	for _, c := range bad {
		r := e.Ingest(admintest.EnqueueSecret, c.key, c.body)
		if r.Status != http.StatusBadRequest || !strings.Contains(r.ErrText(t), c.want) {
			t.Errorf("%s: %d %s, want 400 mentioning %q", c.name, r.Status, r.Body, c.want)
		}
	}
	// Too large: 413.
	huge := `{"kind": "test.greet", "args": {"name": "` + strings.Repeat("x", admin.DefaultMaxBodyBytes) + `"}}`
	if r := e.Ingest(admintest.EnqueueSecret, "bad-huge", huge); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("a body above 1 MiB: %d %s, want 413", r.Status, r.Body)
	}
	// Not JSON: 415.
	if r := e.Call("POST", "tasks", admintest.EnqueueSecret, "kind=test.greet", map[string]string{"Idempotency-Key": "bad-form", "Content-Type": "application/x-www-form-urlencoded"}); r.Status != http.StatusUnsupportedMediaType {
		t.Errorf("a form post: %d %s, want 415", r.Status, r.Body)
	}
	if n, msgs := e.Totals(); n != 1 || msgs != 0 {
		t.Fatalf("after the bad requests: %d tasks in the ledger and %d messages in the broker, want 1 and 0", n, msgs)
	}

	// Roles: a read token cannot enqueue; the enqueue token reads only status.
	if r := e.Ingest(admintest.ReadSecret, "ro-1", body); r.Status != http.StatusForbidden {
		t.Errorf("read token ingest: %d %s, want 403", r.Status, r.Body)
	}
	for _, p := range []string{"tasks/" + id, "lanes", "dead", "tasks"} {
		if r := e.Call("GET", p, admintest.EnqueueSecret, nil, nil); r.Status != http.StatusForbidden {
			t.Errorf("enqueue token GET %s: %d, want 403", p, r.Status)
		}
	}

	// Tenants: acme's token enqueues into acme, whatever it leaves out, and
	// may not name another tenant; globex's token never sees acme's task.
	ra := e.Ingest(admintest.AcmeSecret, "acme-1", map[string]any{"kind": "test.greet", "args": map[string]string{"name": "acme"}})
	if ra.Status != http.StatusAccepted {
		t.Fatalf("acme ingest: %d %s", ra.Status, ra.Body)
	}
	acmeID := ra.JSON(t)["id"].(string)
	if tk := e.WaitState(acmeID, ledger.Completed); tk.Tenant != "acme" {
		t.Errorf("acme's task has tenant %q", tk.Tenant)
	}
	if r := e.Ingest(admintest.AcmeSecret, "acme-2", `{"kind": "test.greet", "args": {"name": "x"}, "tenant": "globex"}`); r.Status != http.StatusBadRequest {
		t.Errorf("acme naming globex: %d %s, want 400", r.Status, r.Body)
	}
	for _, p := range []string{"tasks/" + acmeID, "tasks/" + acmeID + "/status"} {
		if r := e.Call("GET", p, admintest.GlobexSecret, nil, nil); r.Status != http.StatusNotFound {
			t.Errorf("globex reading acme's %s: %d %s, want 404", p, r.Status, r.Body)
		}
		if r := e.Call("GET", p, admintest.AcmeSecret, nil, nil); r.Status != http.StatusOK {
			t.Errorf("acme reading its own %s: %d %s", p, r.Status, r.Body)
		}
	}
	if r := e.Call("GET", "tasks?tenant=acme", admintest.GlobexSecret, nil, nil); r.Status != http.StatusOK || len(r.JSON(t)["tasks"].([]any)) != 0 {
		t.Errorf("globex listing acme's tasks: %d %s, want an empty list", r.Status, r.Body)
	}
	// A task that does not exist: 404 for everyone.
	if r := e.Call("GET", "tasks/nope/status", admintest.EnqueueSecret, nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("unknown task: %d %s", r.Status, r.Body)
	}
	// The audit log names the token of every ingest, never a secret.
	logs := e.Logs.String()
	if !strings.Contains(logs, "token=producer") || !strings.Contains(logs, "token=acme-admin") {
		t.Errorf("audit log lacks the tokens' names:\n%s", logs)
	}
	for _, s := range []string{admintest.AdminSecret, admintest.ReadSecret, admintest.EnqueueSecret, admintest.AcmeSecret, admintest.GlobexSecret} {
		if strings.Contains(logs, s) {
			t.Fatalf("a secret is in the log")
		}
	}
}

// TestHandler_Auth: 401 without or with a bad token, 403 for a role that
// may not, the unauthenticated probes, and no CORS.
func TestHandler_Auth(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	item := e.Enqueue(admintest.FlakyArgs{Item: "i-1"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.WaitDead("batch", item, 1)

	for name, hdr := range map[string]map[string]string{
		"no header":    nil,
		"basic auth":   {"Authorization": "Basic dXNlcjpwYXNz"},
		"empty bearer": {"Authorization": "Bearer "},
		"wrong token":  {"Authorization": "Bearer not-a-token-at-all-000"},
	} {
		for _, p := range []string{"lanes", "dead", "tasks/" + item, "nope"} {
			r := e.Call("GET", p, "", nil, hdr)
			if r.Status != http.StatusUnauthorized || !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") || r.ErrText(t) == "" {
				t.Errorf("%s, GET %s: %d %q %s, want 401 with WWW-Authenticate and a JSON error", name, p, r.Status, r.Header.Get("WWW-Authenticate"), r.Body)
			}
		}
		r := e.Call("POST", "dead/replay", "", map[string]any{"ids": []string{item}}, hdr)
		if r.Status != http.StatusUnauthorized {
			t.Errorf("%s, replay: %d, want 401", name, r.Status)
		}
	}
	// The read-only token is refused replay, and the dead letter stays.
	r := e.Call("POST", "dead/replay", admintest.ReadSecret, map[string]any{"ids": []string{item}}, nil)
	if r.Status != http.StatusForbidden || !strings.Contains(r.ErrText(t), "admin role") {
		t.Errorf("read token replay: %d %s, want 403", r.Status, r.Body)
	}
	for _, p := range []string{"dead/purge", "dead/move", "lanes/batch/pause", "reviews/" + item + "/approve"} {
		if r := e.Call("POST", p, admintest.ReadSecret, map[string]any{"ids": []string{item}, "to_lane": "interactive"}, nil); r.Status != http.StatusForbidden {
			t.Errorf("read token POST %s: %d, want 403", p, r.Status)
		}
	}
	if s, _ := e.B.Stats(e.Ctx, "batch"); s.DeadLettered != 1 || e.WaitState(item, ledger.Dead) == nil {
		t.Fatalf("refused calls changed something: %+v", s)
	}
	// The read token reads, without task arguments; the admin sees them.
	rd := e.Call("GET", "dead", admintest.ReadSecret, nil, nil)
	if rd.Status != http.StatusOK || strings.Contains(string(rd.Body), `"args"`) || !strings.Contains(string(rd.Body), admintest.FlakyErrorText) {
		t.Errorf("read token GET dead: %d %s", rd.Status, rd.Body)
	}
	ad := e.Call("GET", "dead/batch/"+item, admintest.AdminSecret, nil, nil)
	if ad.Status != http.StatusOK || !strings.Contains(string(ad.Body), `"args":{"item":"i-1"}`) {
		t.Errorf("admin GET dead/batch/%s: %d %s, want the args", item, ad.Status, ad.Body)
	}
	if r := e.Call("GET", "tasks/"+item, admintest.ReadSecret, nil, nil); r.Status != http.StatusOK || strings.Contains(string(r.Body), `"args"`) {
		t.Errorf("read token GET task: %d %s, want no args", r.Status, r.Body)
	}
	if r := e.Call("GET", "whoami", admintest.ReadSecret, nil, nil); r.Status != http.StatusOK || r.JSON(t)["role"] != "read" {
		t.Errorf("whoami: %d %s", r.Status, r.Body)
	}
	// Unknown API routes are JSON 404s once authenticated.
	if r := e.Call("GET", "nope", admintest.ReadSecret, nil, nil); r.Status != http.StatusNotFound || r.ErrText(t) == "" {
		t.Errorf("unknown route: %d %s", r.Status, r.Body)
	}

	// Probes need no token.
	if r := e.Call("GET", e.Server.URL+"/healthz", "", nil, nil); r.Status != http.StatusOK {
		t.Errorf("healthz: %d %s", r.Status, r.Body)
	}
	if r := e.Call("GET", e.Server.URL+"/readyz", "", nil, nil); r.Status != http.StatusOK || r.JSON(t)["status"] != "ready" {
		t.Errorf("readyz: %d %s", r.Status, r.Body)
	}
	// /metrics needs a token.
	if r := e.Call("GET", e.Server.URL+"/metrics", "", nil, nil); r.Status != http.StatusUnauthorized {
		t.Errorf("metrics without a token: %d", r.Status)
	}
	if r := e.Call("GET", e.Server.URL+"/metrics", admintest.ReadSecret, nil, nil); r.Status != http.StatusOK || !strings.Contains(string(r.Body), "switchyard_test_metric 1") {
		t.Errorf("metrics: %d %s", r.Status, r.Body)
	}
	// No CORS: a preflight gets no Access-Control-* answer.
	r = e.Call("OPTIONS", "dead/replay", "", nil, map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST", "Content-Type": ""})
	if r.Status != http.StatusUnauthorized || r.Header.Get("Access-Control-Allow-Origin") != "" || r.Header.Get("Access-Control-Allow-Headers") != "" {
		t.Errorf("preflight: %d %v, want an error and no CORS headers", r.Status, r.Header)
	}
	if !strings.Contains(e.Logs.String(), "admin request refused") {
		t.Errorf("refused requests are not logged")
	}
}

// TestHandler_CSRF: state-changing calls need a JSON content type and, when
// the browser says where they come from, the same origin.
func TestHandler_CSRF(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	item := e.Enqueue(admintest.FlakyArgs{Item: "c-1"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.WaitDead("batch", item, 1)
	body := map[string]any{"ids": []string{item}}
	refused := []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"same-site subdomain", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"foreign Origin", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"form post", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"multipart", map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, http.StatusUnsupportedMediaType},
		{"text/plain", map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		{"no content type", map[string]string{"Content-Type": ""}, http.StatusUnsupportedMediaType},
	}
	for _, c := range refused {
		r := e.Call("POST", "dead/replay", admintest.AdminSecret, body, c.hdr)
		if r.Status != c.want || r.ErrText(t) == "" {
			t.Errorf("%s: %d %s, want %d", c.name, r.Status, r.Body, c.want)
		}
	}
	if s, _ := e.B.Stats(e.Ctx, "batch"); s.DeadLettered != 1 {
		t.Fatalf("a refused request replayed the dead letter: %+v", s)
	}
	// The same call from the dashboard's own origin goes through.
	e.Fixed.Store(true)
	r := e.Call("POST", "dead/replay", admintest.AdminSecret, body, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": e.Server.URL,
		"Content-Type": "application/json; charset=utf-8"})
	if r.Status != http.StatusOK || r.JSON(t)["done"] != float64(1) {
		t.Fatalf("same-origin replay: %d %s", r.Status, r.Body)
	}
	e.WaitState(item, ledger.Completed)
}

// TestHandler_DeadLetters: list, show, the bulk operations' validation,
// replay by id, and the event log naming the token.
func TestHandler_DeadLetters(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	a := e.Enqueue(admintest.FlakyArgs{Item: "a"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.WaitDead("batch", a, 1)
	b := e.Enqueue(admintest.FlakyArgs{Item: "b"}, &switchyard.EnqueueOpts{Lane: "batch", Tenant: "acme"})
	e.WaitDead("batch", b, 2)
	// globex's dead letter must survive everything acme's token does.
	g := e.Enqueue(admintest.FlakyArgs{Item: "g"}, &switchyard.EnqueueOpts{Lane: "batch", Tenant: "globex"})
	e.WaitDead("batch", g, 3)

	r := e.Call("GET", "dead?lane=batch&tenant=&limit=2", admintest.ReadSecret, nil, nil)
	var list struct {
		Dead []struct {
			ID, Lane, Kind, Tenant, Reason, Error string
			Attempts                              []struct{ Attempt int }
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal(r.Body, &list); err != nil || len(list.Dead) != 2 {
		t.Fatalf("GET dead: %d %s", r.Status, r.Body)
	}
	for _, d := range list.Dead {
		if d.Reason != string(broker.ReasonMaxAttempts) || !strings.Contains(d.Error, admintest.FlakyErrorText) || len(d.Attempts) != 2 || d.Kind != "test.flaky" {
			t.Errorf("dead letter %+v, want max_attempts with the error and 2 attempts", d)
		}
	}
	if r := e.Call("GET", "dead?reason=bogus", admintest.ReadSecret, nil, nil); r.Status != http.StatusBadRequest {
		t.Errorf("unknown reason: %d %s", r.Status, r.Body)
	}
	if r := e.Call("GET", "dead?limit=-1", admintest.ReadSecret, nil, nil); r.Status != http.StatusBadRequest {
		t.Errorf("negative limit: %d %s", r.Status, r.Body)
	}
	if r := e.Call("GET", "tasks?state=sleeping", admintest.ReadSecret, nil, nil); r.Status != http.StatusBadRequest || !strings.Contains(r.ErrText(t), "unknown state") {
		t.Errorf("unknown state: %d %s", r.Status, r.Body)
	}
	// The acme token sees only acme's dead letter, and a as not found.
	if r := e.Call("GET", "dead", admintest.AcmeSecret, nil, nil); !strings.Contains(string(r.Body), b) || strings.Contains(string(r.Body), a) || strings.Contains(string(r.Body), g) {
		t.Errorf("acme GET dead: %s", r.Body)
	}
	if r := e.Call("GET", "dead/batch/"+a, admintest.AcmeSecret, nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("acme GET another tenant's dead letter: %d", r.Status)
	}

	for _, c := range []struct {
		path string
		body any
		want string
	}{
		{"dead/purge", `{}`, "give ids"},
		{"dead/purge", `{"filter": {}}`, "refusing to purge every dead letter"},
		{"dead/purge", `{"ids": []}`, "ids is empty"},
		{"dead/replay", `{"ids": [""]}`, "empty"},
		{"dead/move", `{"ids": ["` + a + `"]}`, "to_lane is required"},
		{"dead/replay", `{"ids": ["` + a + `"], "to_lane": "batch"}`, "only for move"},
		{"dead/replay", `{"filter": {"reason": "bogus"}}`, "unknown dead-letter reason"},
		{"dead/replay", `{"filter": {"colour": "red"}}`, `unknown field "colour"`},
	} {
		r := e.Call("POST", c.path, admintest.AdminSecret, c.body, nil)
		if r.Status != http.StatusBadRequest || !strings.Contains(r.ErrText(t), c.want) {
			t.Errorf("POST %s %s: %d %s, want 400 mentioning %q", c.path, c.body, r.Status, r.Body, c.want)
		}
	}
	if s, _ := e.B.Stats(e.Ctx, "batch"); s.DeadLettered != 3 {
		t.Fatalf("refused bulk calls changed the dead-letter queue: %+v", s)
	}

	// Replay a by id; it completes, and its events name the token.
	e.Fixed.Store(true)
	r = e.Call("POST", "dead/replay", admintest.AdminSecret, map[string]any{"ids": []string{a}}, nil)
	if r.Status != http.StatusOK || r.JSON(t)["done"] != float64(1) {
		t.Fatalf("replay: %d %s", r.Status, r.Body)
	}
	e.WaitState(a, ledger.Completed)
	evs, err := e.L.Events(e.Ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		found = found || (ev.Actor == "token:ops-admin" && ev.From == ledger.Dead)
	}
	if !found {
		t.Errorf("no event from dead by token:ops-admin in %+v", evs)
	}
	// The task view shows the timeline.
	r = e.Call("GET", "tasks/"+a, admintest.ReadSecret, nil, nil)
	var detail struct {
		Task     struct{ State string }
		Attempts []struct{ Number int }
		Events   []struct{ Reason, Actor string }
		Effects  []struct{ Key, State string }
	}
	if err := json.Unmarshal(r.Body, &detail); err != nil || detail.Task.State != "completed" || len(detail.Attempts) != 3 ||
		len(detail.Events) < 5 || len(detail.Effects) != 1 || detail.Effects[0].Key != "reserve/a" {
		t.Errorf("task detail: %d %s", r.Status, r.Body)
	}
	// Purging b by filter works for acme's token (its own tenant only):
	// globex's dead letter, in the same lane, stays.
	r = e.Call("POST", "dead/purge", admintest.AcmeSecret, map[string]any{"filter": map[string]string{"lane": "batch"}}, nil)
	if r.Status != http.StatusOK || r.JSON(t)["done"] != float64(1) || r.JSON(t)["truncated"] != false {
		t.Fatalf("acme purge: %d %s", r.Status, r.Body)
	}
	if s, _ := e.B.Stats(e.Ctx, "batch"); s.DeadLettered != 1 {
		t.Errorf("after purge: %+v", s)
	}
	if r := e.Call("GET", "dead?lane=batch", admintest.ReadSecret, nil, nil); !strings.Contains(string(r.Body), g) || strings.Contains(string(r.Body), b) {
		t.Errorf("after acme's purge: %s, want globex's %s only", r.Body, g)
	}
	logs := e.Logs.String()
	for _, want := range []string{`action="POST /api/v1/dead/replay"`, "token=ops-admin", `action="POST /api/v1/dead/purge"`, "token=acme-admin", "status=200"} {
		if !strings.Contains(logs, want) {
			t.Errorf("audit log lacks %q:\n%s", want, logs)
		}
	}
}

// TestHandler_Sandbox: a dead letter replayed in sandbox mode over HTTP
// completes with its effect recorded as "would do" and not executed; the
// dead letter stays.
func TestHandler_Sandbox(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	id := e.Enqueue(admintest.FlakyArgs{Item: "sb"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.WaitDead("batch", id, 1)
	e.Fixed.Store(true)

	if r := e.Call("POST", "dead/batch/"+id+"/sandbox", admintest.ReadSecret, nil, nil); r.Status != http.StatusForbidden {
		t.Errorf("read token sandbox: %d %s, want 403", r.Status, r.Body)
	}
	if r := e.Call("POST", "dead/batch/"+id+"/sandbox", admintest.AcmeSecret, nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("another tenant's token sandbox: %d %s, want 404", r.Status, r.Body)
	}
	if r := e.Call("POST", "dead/batch/nope/sandbox", admintest.AdminSecret, nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("sandbox of an unknown dead letter: %d %s, want 404", r.Status, r.Body)
	}
	r := e.Call("POST", "dead/batch/"+id+"/sandbox", admintest.AdminSecret, nil, nil)
	if r.Status != http.StatusAccepted {
		t.Fatalf("sandbox: %d %s", r.Status, r.Body)
	}
	j := r.JSON(t)
	sid, _ := j["id"].(string)
	if sid == "" || sid == id || j["status_url"] != "/api/v1/tasks/"+sid+"/status" {
		t.Fatalf("sandbox answered %s", r.Body)
	}
	e.WaitState(sid, ledger.Completed)
	r = e.Call("GET", "tasks/"+sid, admintest.ReadSecret, nil, nil)
	var detail struct {
		Effects []struct{ Key, State string }
	}
	if err := json.Unmarshal(r.Body, &detail); err != nil || len(detail.Effects) != 1 || detail.Effects[0].Key != "reserve/sb" || detail.Effects[0].State != string(ledger.EffectWouldDo) {
		t.Errorf("sandbox task's effects: %s, want reserve/sb would_do", r.Body)
	}
	if n := e.Reserved.Load(); n != 0 {
		t.Errorf("the sandbox executed the effect %d times", n)
	}
	if tk := e.WaitState(id, ledger.Dead); tk.State != ledger.Dead {
		t.Errorf("the original is %s", tk.State)
	}
	if s, _ := e.B.Stats(e.Ctx, "batch"); s.DeadLettered != 1 {
		t.Errorf("the dead letter left its queue: %+v", s)
	}
	if !strings.Contains(e.Logs.String(), "sandbox_id="+sid) {
		t.Errorf("the audit log lacks the sandbox task")
	}
}

// TestHandler_ReviewsAndLanes: the review queue and lane pause over HTTP.
func TestHandler_ReviewsAndLanes(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	a := e.Enqueue(admintest.RefundArgs{Order: "A-1", Amount: 900}, &switchyard.EnqueueOpts{Lane: "interactive"})
	b := e.Enqueue(admintest.RefundArgs{Order: "B-2", Amount: 5000}, &switchyard.EnqueueOpts{Lane: "interactive"})
	e.WaitState(a, ledger.AwaitingReview)
	e.WaitState(b, ledger.AwaitingReview)

	r := e.Call("GET", "reviews", admintest.ReadSecret, nil, nil)
	if r.Status != http.StatusOK || len(r.JSON(t)["reviews"].([]any)) != 2 || !strings.Contains(string(r.Body), "refund above the automatic limit") {
		t.Fatalf("GET reviews: %d %s", r.Status, r.Body)
	}
	if r := e.Call("POST", "reviews/"+a+"/reject", admintest.AdminSecret, `{}`, nil); r.Status != http.StatusBadRequest || !strings.Contains(r.ErrText(t), "reason") {
		t.Errorf("reject without a reason: %d %s", r.Status, r.Body)
	}
	if r := e.Call("POST", "reviews/"+a+"/claim", admintest.AdminSecret, nil, nil); r.Status != http.StatusOK {
		t.Errorf("claim: %d %s", r.Status, r.Body)
	}
	if r := e.Call("POST", "reviews/"+a+"/approve", admintest.AdminSecret, `{"note": "ok by me"}`, nil); r.Status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	if r := e.Call("POST", "reviews/"+b+"/reject", admintest.AdminSecret, `{"reason": "above policy"}`, nil); r.Status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.Status, r.Body)
	}
	e.WaitState(a, ledger.Completed)
	if tk := e.WaitState(b, ledger.Rejected); !strings.Contains(tk.LastError, "token:ops-admin") {
		t.Errorf("rejected task's error %q does not name the token", tk.LastError)
	}
	if r := e.Call("POST", "reviews/"+b+"/approve", admintest.AdminSecret, nil, nil); r.Status != http.StatusConflict {
		t.Errorf("approving a rejected task: %d %s, want 409", r.Status, r.Body)
	}
	if r := e.Call("POST", "reviews/nope/approve", admintest.AdminSecret, nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("approving an unknown task: %d %s, want 404", r.Status, r.Body)
	}

	// Lanes: pause and resume with the admin token; a tenant's token may not.
	if r := e.Call("POST", "lanes/batch/pause", admintest.AcmeSecret, nil, nil); r.Status != http.StatusForbidden {
		t.Errorf("tenant-scoped pause: %d %s, want 403", r.Status, r.Body)
	}
	if r := e.Call("POST", "lanes/batch/pause", admintest.AdminSecret, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.Status, r.Body)
	}
	r = e.Call("GET", "lanes", admintest.ReadSecret, nil, nil)
	var lanes struct {
		Lanes []struct {
			Lane        string
			PausedBy    string `json:"paused_by"`
			Paused      bool
			ObjectiveMS float64 `json:"objective_ms"`
		}
	}
	_ = json.Unmarshal(r.Body, &lanes)
	paused := map[string]string{}
	for _, l := range lanes.Lanes {
		if l.Paused {
			paused[l.Lane] = l.PausedBy
		}
	}
	if r.Status != http.StatusOK || len(lanes.Lanes) < 4 || len(paused) != 1 || paused[""] != "" {
		t.Errorf("lanes after pause: %d %s", r.Status, r.Body)
	}
	if !strings.Contains(string(r.Body), `"lane":"batch"`) || !strings.Contains(string(r.Body), `"paused_by":"token:ops-admin"`) {
		t.Errorf("lanes do not show batch paused by the token: %s", r.Body)
	}
	if r := e.Call("POST", "lanes/batch/resume", admintest.AdminSecret, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("resume: %d %s", r.Status, r.Body)
	}
	if r := e.Call("POST", "lanes/no%20such/pause", admintest.AdminSecret, nil, nil); r.Status != http.StatusBadRequest {
		t.Errorf("pausing a malformed lane: %d %s, want 400", r.Status, r.Body)
	}
}

// TestHandler_Mounted: under a prefix, the page, its assets and the status
// URL carry the prefix, and the bare prefix redirects to the page.
func TestHandler_Mounted(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "/ops")
	noRedirect := *e.Server.Client()
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := noRedirect.Get(e.Server.URL + "/ops")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if (res.StatusCode != http.StatusMovedPermanently && res.StatusCode != http.StatusTemporaryRedirect) || res.Header.Get("Location") != "/ops/" {
		t.Errorf("GET /ops: %d to %q, want a redirect to /ops/", res.StatusCode, res.Header.Get("Location"))
	}
	page := e.Call("GET", e.Server.URL+"/ops/", "", nil, nil)
	if page.Status != http.StatusOK || !strings.Contains(string(page.Body), `src="ui/app.js"`) ||
		!strings.Contains(page.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("page: %d %v", page.Status, page.Header)
	}
	// The page's filters offer every dead-letter reason and task state.
	for _, r := range admin.Reasons() {
		if !strings.Contains(string(page.Body), "<option>"+string(r)+"</option>") {
			t.Errorf("the page's reason filter lacks %q", r)
		}
	}
	for _, st := range admin.States() {
		if !strings.Contains(string(page.Body), "<option>"+string(st)+"</option>") {
			t.Errorf("the page's state filter lacks %q", st)
		}
	}
	for _, p := range []string{"ui/app.js", "ui/style.css"} {
		if r := e.Call("GET", e.Server.URL+"/ops/"+p, "", nil, nil); r.Status != http.StatusOK || len(r.Body) < 1000 {
			t.Errorf("%s: %d", p, r.Status)
		}
	}
	if r := e.Call("GET", e.Server.URL+"/ops/ui/", "", nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("directory listing: %d", r.Status)
	}
	// Behind a bare http.StripPrefix (no ServeMux to add the slash), the
	// handler redirects the bare prefix itself.
	h, err := admin.NewHandler(e.Ops, admin.HandlerConfig{Tokens: admintest.Tokens(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	bare := httptest.NewServer(http.StripPrefix("/x", h))
	defer bare.Close()
	res, err = noRedirect.Get(bare.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/x/" {
		t.Errorf("bare StripPrefix, GET /x: %d to %q, want 301 to /x/", res.StatusCode, res.Header.Get("Location"))
	}

	r := e.Ingest(admintest.EnqueueSecret, "m-1", map[string]any{"kind": "test.greet", "args": map[string]string{"name": "m"}})
	if r.Status != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", r.Status, r.Body)
	}
	j := r.JSON(t)
	want := "/ops/api/v1/tasks/" + j["id"].(string) + "/status"
	if j["status_url"] != want {
		t.Fatalf("status_url %v, want %s", j["status_url"], want)
	}
	if r := e.Call("GET", e.Server.URL+want, admintest.EnqueueSecret, nil, nil); r.Status != http.StatusOK {
		t.Errorf("status_url: %d %s", r.Status, r.Body)
	}
}

func TestNewHandler_BadConfig(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	ok := admin.Token{Name: "a", Secret: strings.Repeat("s", 16), Role: admin.RoleAdmin}
	for name, cfg := range map[string]admin.HandlerConfig{
		"no tokens":      {},
		"short secret":   {Tokens: []admin.Token{{Name: "a", Secret: "short", Role: admin.RoleAdmin}}},
		"unknown role":   {Tokens: []admin.Token{{Name: "a", Secret: ok.Secret, Role: "root"}}},
		"no name":        {Tokens: []admin.Token{{Secret: ok.Secret, Role: admin.RoleRead}}},
		"name twice":     {Tokens: []admin.Token{ok, {Name: "a", Secret: strings.Repeat("t", 16), Role: admin.RoleRead}}},
		"secret twice":   {Tokens: []admin.Token{ok, {Name: "b", Secret: ok.Secret, Role: admin.RoleRead}}},
		"bad origin":     {Tokens: []admin.Token{ok}, TrustedOrigins: []string{"not a url"}},
		"secret w/space": {Tokens: []admin.Token{{Name: "a", Secret: "abc def ghi jkl mno", Role: admin.RoleRead}}},
	} {
		if _, err := admin.NewHandler(e.Ops, cfg); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		} else if strings.Contains(err.Error(), ok.Secret) {
			t.Errorf("%s: the error quotes a secret", name)
		}
	}
	if _, err := admin.NewHandler(nil, admin.HandlerConfig{Tokens: []admin.Token{ok}}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("nil ops: %v", err)
	}
}
