package browsertest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
)

// TestDashboard_TellsTheTruth (issue 20, item 10): durations never read
// "3 m 60 s"; a tenant's token counts its own dead letters, not every
// tenant's; a failed sandbox replay's dead letter is marked as one; at a
// 390 px viewport the header stays on one line and nothing widens the
// page.
func TestDashboard_TellsTheTruth(t *testing.T) {
	e := admintest.New(t, "/admin")
	br := newBrowser(t)

	d1 := e.Enqueue(admintest.FlakyArgs{Item: "sku-1"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.WaitDead("batch", d1, 1)
	d2 := e.Enqueue(admintest.FlakyArgs{Item: "sku-2"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.WaitDead("batch", d2, 2)
	acme := e.Enqueue(admintest.FlakyArgs{Item: "sku-acme"}, &switchyard.EnqueueOpts{Lane: "batch", Tenant: "acme"})
	e.WaitDead("batch", acme, 3)
	// A sandbox replay that fails again dead-letters its copy.
	sb, err := e.Ops.ReplaySandbox(e.Ctx, admin.Scope{}, "batch", d1, "operator:test")
	if err != nil {
		t.Fatal(err)
	}
	e.WaitDead("batch", sb, 4)
	it, err := e.Ops.DeadLetter(e.Ctx, admin.Scope{}, "batch", sb)
	if err != nil || it.SandboxOf != d1 {
		t.Fatalf("the sandbox copy's dead letter: %+v %v, want SandboxOf %s", it, err, d1)
	}
	r := e.Call("GET", "dead?lane=batch", admintest.AdminSecret, nil, nil)
	if !strings.Contains(string(r.Body), `"sandbox_of":"`+d1+`"`) {
		t.Errorf("GET dead does not mark the sandbox copy: %s", r.Body)
	}

	br.do("load the dashboard", 30*time.Second,
		chromedp.Navigate(e.Server.URL+"/admin/"),
		chromedp.WaitVisible(chromedp.ID("token-input")))
	for ms, want := range map[float64]string{239600: "4 m 0 s", 59600: "1 m 0 s", 119999: "2 m 0 s", 9960: "10 s", 3600000 - 400: "1 h 0 m"} {
		got := evalIn[string](br, "fmtDur", fmt.Sprintf("window.switchyardDashboard.fmtDur(%v)", ms))
		if got != want {
			t.Errorf("fmtDur(%v ms) = %q, want %q", ms, got, want)
		}
	}

	// acme's token: the dead-letter count is acme's one, not all four.
	br.do("sign in as acme", 30*time.Second,
		chromedp.SendKeys(chromedp.ID("token-input"), admintest.AcmeSecret),
		chromedp.Click(chromedp.ID("token-submit")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="lane-batch"]`)))
	br.waitJS("acme's dead-letter count", `document.getElementById("count-dead").textContent === "1"`, 15*time.Second)
	if s := br.text(`[data-testid="lane-batch"] .flags`); strings.Contains(s, "4 dead") {
		t.Errorf("acme's lane card shows every tenant's dead letters: %q", s)
	}

	// The admin sees the sandbox copy marked, at phone width.
	br.do("sign out", 20*time.Second, chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("token-input")))
	br.do("sign in as admin", 30*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.getElementById("token-input").value = ""`),
		chromedp.SendKeys(chromedp.ID("token-input"), admintest.AdminSecret),
		chromedp.Click(chromedp.ID("token-submit")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="lane-batch"]`)))
	br.waitJS("every tenant's dead letters for the admin", `document.getElementById("count-dead").textContent === "4"`, 15*time.Second)
	br.do("phone viewport", 20*time.Second, chromedp.EmulateViewport(390, 844))
	for _, view := range []string{"lanes", "dead", "tasks", "reviews"} {
		br.do("open "+view, 20*time.Second, chromedp.Click(chromedp.ID("tab-"+view)))
		br.waitJS(view+" shown", `!document.querySelector('[data-view="`+view+`"]').hidden`, 10*time.Second)
		time.Sleep(300 * time.Millisecond) // one render
		if view == "dead" {
			br.waitJS("the sandbox copy is marked", `(document.querySelector('tr[data-id="`+sb+`"] [data-testid="dead-sandbox"]') || {textContent: ""}).textContent.includes("sandbox copy of `+d1+`")`, 15*time.Second)
		}
		br.screenshot("390px-" + view)
		if w := evalIn[int](br, "page width", `document.documentElement.scrollWidth`); w > 390 {
			t.Errorf("%s at 390 px: the page is %d px wide (something overflows)", view, w)
		}
		if h := evalIn[int](br, "header height", `document.querySelector("header.top").scrollHeight`); h > 52 {
			t.Errorf("%s at 390 px: the header is %d px high (it wraps)", view, h)
		}
	}
}
