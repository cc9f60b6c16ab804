package admin_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/providerbatch/sqlstore"
	"github.com/switchyard-dev/switchyard/spend"
)

// newSpendEnv is an admin API over a SQLite ledger whose spend rows hold
// four calls: acme's two gpt-a calls an hour apart, acme's gpt-b call and
// globex's gpt-a call, all within the last three hours.
func newSpendEnv(t *testing.T) (*admintest.Env, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	path := filepath.Join(t.TempDir(), "ledger.db")
	L, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	st, err := sqlstore.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	base := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	for i, c := range []struct {
		tenant, model string
		at            time.Duration
		u             spend.Usage
		cost          spend.Micros
	}{
		{"acme", "gpt-a", 10 * time.Minute, spend.Usage{Input: 100, CachedInput: 300, Output: 10}, 1_000},
		{"acme", "gpt-a", 70 * time.Minute, spend.Usage{Input: 100, Output: 10}, 2_000},
		{"acme", "gpt-b", 20 * time.Minute, spend.Usage{Input: 50, Output: 5}, 500},
		{"globex", "gpt-a", 80 * time.Minute, spend.Usage{Input: 10, Output: 1}, 70},
	} {
		id := "call-" + string(rune('a'+i))
		admintest.Must(t, st.ReserveSpend(ctx, limits.SpendReservation{ID: id, TaskID: "task-" + id, Tenant: c.tenant, Provider: "openai", Model: c.model,
			Estimate: c.cost * 2, Now: base.Add(c.at)}))
		admintest.Must(t, st.SettleSpend(ctx, id, c.u, c.cost))
	}
	ops, err := admin.New(admin.Config{Broker: b, Ledger: L, Spend: st})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.NewHandler(ops, admin.HandlerConfig{Tokens: admintest.Tokens()})
	if err != nil {
		t.Fatal(err)
	}
	e := &admintest.Env{T: t, Ctx: ctx, Logs: &admintest.SyncBuffer{}, L: L, B: b, Ops: ops}
	e.Server = httptest.NewServer(h)
	t.Cleanup(e.Server.Close)
	e.API = e.Server.URL + "/api/v1/"
	return e, base
}

// TestHandler_Spend: GET /api/v1/spend sums the ledger's spend rows by
// tenant and model per hour; a tenant filter, a tenant-scoped token (its
// own tenant only) and other groupings narrow it; every malformed or out
// of range parameter is a 400 naming it.
func TestHandler_Spend(t *testing.T) {
	t.Parallel()
	e, base := newSpendEnv(t)
	since, until := base.Format(time.RFC3339), base.Add(3*time.Hour).Format(time.RFC3339)
	info, r := e.Spend("spend?since="+since+"&until="+until+"&step=1h", admintest.ReadSecret)
	if r.Status != http.StatusOK {
		t.Fatalf("GET spend: %d %s", r.Status, r.Body)
	}
	if info.Buckets != 3 || info.StepMS != 3_600_000 || len(info.Series) != 3 || strings.Join(info.By, ",") != "tenant,model" {
		t.Fatalf("spend = %+v", info)
	}
	got := map[string]admin.SpendSeries{}
	for _, s := range info.Series {
		got[s.Group["tenant"]+"/"+s.Group["model"]] = s
	}
	acmeA := got["acme/gpt-a"]
	if acmeA.Calls != 2 || acmeA.Micros != 3_000 || acmeA.Cost != "$0.003000" || acmeA.CachedShare != 0.6 ||
		acmeA.MicrosPerBucket[0] != 1_000 || acmeA.MicrosPerBucket[1] != 2_000 || acmeA.MicrosPerBucket[2] != 0 {
		t.Errorf("acme/gpt-a = %+v", acmeA)
	}
	if got["acme/gpt-b"].Micros != 500 || got["globex/gpt-a"].MicrosPerBucket[1] != 70 {
		t.Errorf("series = %+v", info.Series)
	}
	if info.Total.Micros != 3_570 || info.Total.Calls != 4 || info.Total.CallsPerBucket[0] != 2 {
		t.Errorf("total = %+v", info.Total)
	}

	// A tenant-scoped token reads its own tenant, whatever it asks.
	own, r := e.Spend("spend?since="+since+"&until="+until+"&step=1h", admintest.GlobexSecret)
	if r.Status != http.StatusOK || own.Tenant != "globex" || len(own.Series) != 1 || own.Total.Micros != 70 {
		t.Errorf("globex's own spend: %d %s", r.Status, r.Body)
	}
	// Filtered by tenant, grouped by model only; the default range (the
	// last 24 h) in its default 24 steps.
	byModel, r := e.Spend("spend?tenant=acme&by=model", admintest.ReadSecret)
	if r.Status != http.StatusOK || byModel.Buckets != 24 || byModel.StepMS != 3_600_000 || len(byModel.Series) != 2 || byModel.Total.Micros != 3_500 {
		t.Errorf("acme by model: %d %s", r.Status, r.Body)
	}
	// since as a duration back from until.
	if d, r := e.Spend("spend?since=3h&until="+url.QueryEscape(until)+"&step=30m", admintest.ReadSecret); r.Status != http.StatusOK || d.Buckets != 6 || d.Total.Micros != 3_570 {
		t.Errorf("since=3h: %d %s", r.Status, r.Body)
	}

	for _, c := range []struct {
		query, token string
		status       int
		msg          string
	}{
		{"since=" + until + "&until=" + since, admintest.ReadSecret, 400, "inverted"},
		{"since=" + since + "&until=" + since, admintest.ReadSecret, 400, "empty or inverted"},
		{"since=1969-12-31T00:00:00Z&until=" + until, admintest.ReadSecret, 400, "outside"},
		{"since=" + since + "&until=2262-04-12T00:00:00Z&step=8760h", admintest.ReadSecret, 400, "outside"},
		{"since=" + since + "&until=9999-01-01T00:00:00Z", admintest.ReadSecret, 400, "outside"},
		{"since=500000h", admintest.ReadSecret, 400, "beyond 1970"},
		{"since=9999999999999h", admintest.ReadSecret, 400, "since"},
		{"since=-1h", admintest.ReadSecret, 400, "positive duration"},
		{"since=yesterday", admintest.ReadSecret, 400, "since"},
		{"since=2026-13-01T00:00:00Z", admintest.ReadSecret, 400, "RFC 3339"},
		{"until=tomorrow", admintest.ReadSecret, 400, "until"},
		{"step=30s", admintest.ReadSecret, 400, "shorter than 1m0s"},
		{"step=0", admintest.ReadSecret, 400, "positive duration"},
		{"step=1x", admintest.ReadSecret, 400, "step"},
		{"since=8760h&step=1m", admintest.ReadSecret, 400, "more than 1000"},
		{"by=payload", admintest.ReadSecret, 400, "cannot group spend by"},
		{"by=model,model", admintest.ReadSecret, 400, "twice"},
		{"tenant=" + strings.Repeat("x", 300), admintest.ReadSecret, 400, "longer than 256"},
		{"tenant=a%00b", admintest.ReadSecret, 400, "control character"},
		{"tenant=%ff", admintest.ReadSecret, 400, "UTF-8"},
		{"tenant=acme", admintest.GlobexSecret, 403, "cannot read tenant"},
		{"limit=5", admintest.ReadSecret, 400, "unknown parameter"},
		{"step=1h&step=2h", admintest.ReadSecret, 400, "given 2 times"},
		{"", "", 401, "authentication required"},
		{"", admintest.EnqueueSecret, 403, "role"},
	} {
		r := e.Call("GET", "spend?"+c.query, c.token, nil, nil)
		if r.Status != c.status || !strings.Contains(string(r.Body), c.msg) {
			t.Errorf("GET spend?%s with %q: %d %s, want %d containing %q", c.query, c.token, r.Status, r.Body, c.status, c.msg)
		}
	}
}

// TestHandler_SpendNotConfigured: without a spend store the route is a 501
// that says why, and Ops.Spend is ErrNoSpend.
func TestHandler_SpendNotConfigured(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	r := e.Call("GET", "spend", admintest.ReadSecret, nil, nil)
	if r.Status != http.StatusNotImplemented || !strings.Contains(r.ErrText(t), "no spend store") {
		t.Fatalf("GET spend without a store: %d %s", r.Status, r.Body)
	}
	if _, err := e.Ops.Spend(e.Ctx, admin.Scope{}, admin.SpendQuery{}); !errors.Is(err, admin.ErrNoSpend) {
		t.Fatalf("Ops.Spend = %v", err)
	}
}
