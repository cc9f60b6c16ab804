package browsertest

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestDashboard_Servers: the Servers view lists the running Server as live
// and a server that stopped heartbeating as gone, fits a 390 px viewport,
// and tells a tenant's token why it sees no fleet.
func TestDashboard_Servers(t *testing.T) {
	e := admintest.New(t, "/admin")
	br := newBrowser(t)
	if err := ledger.ServersOf(e.L).RegisterServer(e.Ctx, ledger.Server{ID: "zz-gone-worker", Host: "lost-host", PID: 7,
		Lanes: []string{"batch"}, Slots: 2, Started: time.Now().Add(-time.Hour), Interval: time.Millisecond}); err != nil {
		t.Fatal(err)
	}

	br.do("load the dashboard", 30*time.Second,
		chromedp.Navigate(e.Server.URL+"/admin/"),
		chromedp.WaitVisible(chromedp.ID("token-input")))
	br.do("sign in as reader", 30*time.Second,
		chromedp.SendKeys(chromedp.ID("token-input"), admintest.ReadSecret),
		chromedp.Click(chromedp.ID("token-submit")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="lane-batch"]`)))
	br.do("phone viewport", 20*time.Second, chromedp.EmulateViewport(390, 844))
	br.do("open servers", 20*time.Second, chromedp.Click(chromedp.ID("tab-servers")))
	br.waitJS("two servers listed", `document.querySelectorAll('[data-testid="server-row"]').length === 2`, 15*time.Second)
	br.waitJS("the gone server marked", `document.querySelector('tr[data-id="zz-gone-worker"]').dataset.state === "gone"`, 5*time.Second)
	if s := br.text(`tr[data-id="zz-gone-worker"] [data-testid="server-state"]`); !strings.Contains(s, "gone") {
		t.Errorf("the gone server's state cell: %q", s)
	}
	live := br.text(`tr[data-state="live"]`)
	if !strings.Contains(live, "interactive") || !strings.Contains(live, "/ 4") {
		t.Errorf("the live server's row: %q", live)
	}
	if c := br.text(`#count-servers`); c != "1" {
		t.Errorf("the Servers tab counts %q live servers, want 1", c)
	}
	br.screenshot("390px-servers")
	if w := evalIn[int](br, "page width", `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("servers at 390 px: the page is %d px wide (something overflows)", w)
	}
	if h := evalIn[int](br, "header height", `document.querySelector("header.top").scrollHeight`); h > 52 {
		t.Errorf("servers at 390 px: the header is %d px high (it wraps)", h)
	}

	// A tenant's token: the reason, not a table.
	br.do("sign out", 20*time.Second, chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("token-input")))
	br.do("sign in as acme", 30*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.getElementById("token-input").value = ""`),
		chromedp.SendKeys(chromedp.ID("token-input"), admintest.AcmeSecret),
		chromedp.Click(chromedp.ID("token-submit")))
	br.waitJS("signed in as acme", `document.body.classList.contains("signed-in") && !document.getElementById("login").open`, 15*time.Second)
	br.waitJS("the tenant is told why", `document.getElementById("servers-empty").textContent.includes("tenant-scoped")`, 15*time.Second)
	if rows := evalIn[int](br, "rows", `document.querySelectorAll('[data-testid="server-row"]').length`); rows != 0 {
		t.Errorf("a tenant's token sees %d server rows", rows)
	}
}
