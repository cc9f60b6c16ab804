package browsertest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestDashboard_HistoryAndBulk (issue 20): the Lanes view charts the last
// hour's processed / failed / dead counts from GET /api/v1/history, for
// every lane or one; the dead-letter list selects rows and purges or
// replays just those; the task list selects live tasks and cancels them;
// all of it fits a 390 px viewport; a tenant's token is told why it sees
// no history.
func TestDashboard_HistoryAndBulk(t *testing.T) {
	e := admintest.New(t, "/admin")
	br := newBrowser(t)

	var dead []string
	for i, item := range []string{"b-1", "b-2", "b-3"} {
		id := e.Enqueue(admintest.FlakyArgs{Item: item}, &switchyard.EnqueueOpts{Lane: "batch"})
		e.WaitDead("batch", id, int64(i+1))
		dead = append(dead, id)
	}
	for _, n := range []string{"ann", "bob"} {
		e.WaitState(e.Enqueue(admintest.GreetArgs{Name: n}, &switchyard.EnqueueOpts{Lane: "interactive"}), ledger.Completed)
	}
	var later []string
	for range 2 {
		later = append(later, e.Enqueue(admintest.GreetArgs{Name: "later"}, &switchyard.EnqueueOpts{Lane: "scheduled", Delay: time.Hour}))
	}
	// Wait until the Server's counts reach the ledger: 3 flaky tasks
	// failed twice each and died, 2 greetings succeeded.
	for deadline := time.Now().Add(30 * time.Second); ; {
		r := e.Call("GET", "history", admintest.ReadSecret, nil, nil)
		var b admintest.HistoryBody
		_ = json.Unmarshal(r.Body, &b)
		if r.Status == http.StatusOK && b.Total.ProcessedTotal == 8 && b.Total.DeadTotal == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the history never showed the tasks: %d %s", r.Status, r.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}

	br.do("load the dashboard", 30*time.Second,
		chromedp.Navigate(e.Server.URL+"/admin/"),
		chromedp.WaitVisible(chromedp.ID("token-input")))
	br.do("sign in as admin", 30*time.Second,
		chromedp.SendKeys(chromedp.ID("token-input"), admintest.AdminSecret),
		chromedp.Click(chromedp.ID("token-submit")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="lane-batch"]`)))
	br.do("phone viewport", 20*time.Second, chromedp.EmulateViewport(390, 844))

	// History: every lane, then one.
	br.waitJS("the history totals", `document.getElementById("history-processed").textContent === "8"`, 15*time.Second)
	if f, d := br.text(`#history-failed`), br.text(`#history-dead`); f != "6" || d != "3" {
		t.Errorf("history failed %q dead %q, want 6 and 3", f, d)
	}
	if n := evalIn[int](br, "chart lines", `document.querySelectorAll('svg[data-testid="history-chart"] polyline').length`); n != 3 {
		t.Errorf("the history chart has %d lines, want processed, failed and dead", n)
	}
	if n := evalIn[int](br, "chart points", `document.querySelector('svg[data-testid="history-chart"] polyline[data-series="dead"]').points.length`); n != 60 {
		t.Errorf("the dead line has %d points, want one a minute for an hour", n)
	}
	br.do("pick interactive", 10*time.Second, chromedp.SetValue(chromedp.ID("history-lane"), "interactive"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("history-lane").dispatchEvent(new Event("change"))`))
	br.waitJS("interactive's history", `document.getElementById("history-processed").textContent === "2" && document.getElementById("history-dead").textContent === "0"`, 15*time.Second)
	br.screenshot("390px-history")
	checkFits(t, br, "lanes with the history")

	// Dead letters: select two, purge them; select the rest, replay it.
	br.do("open dead letters", 20*time.Second, chromedp.Click(chromedp.ID("tab-dead")))
	br.waitJS("three dead letters", `document.querySelectorAll('[data-testid="dead-row"]').length === 3`, 15*time.Second)
	if !evalIn[bool](br, "bulk bar hidden", `document.getElementById("dead-bulk").hidden`) {
		t.Error("the bulk bar shows with nothing selected")
	}
	for _, id := range dead[:2] {
		br.do("select "+id, 10*time.Second, chromedp.Click(chromedp.CSS(`input[data-testid="dead-select"][data-id="`+id+`"]`)))
	}
	br.waitJS("two selected", `!document.getElementById("dead-bulk").hidden && document.getElementById("dead-bulk-count").textContent === "2 selected" && document.getElementById("dead-select-all").indeterminate`, 10*time.Second)
	br.screenshot("390px-dead-bulk")
	checkFits(t, br, "dead letters with the bulk bar")
	br.do("purge the two", 10*time.Second, chromedp.Click(chromedp.ID("dead-bulk-purge")), chromedp.WaitVisible(chromedp.ID("confirm-ok")))
	if s := br.text(`#confirm-title`); !strings.Contains(s, "Purge 2 dead letters") {
		t.Errorf("purge confirmation: %q", s)
	}
	br.do("confirm", 10*time.Second, chromedp.Click(chromedp.ID("confirm-ok")))
	br.waitJS("one dead letter left", `document.querySelectorAll('[data-testid="dead-row"]').length === 1 && document.getElementById("dead-bulk").hidden`, 15*time.Second)
	if got := evalIn[string](br, "the one left", `document.querySelector('[data-testid="dead-row"]').dataset.id`); got != dead[2] {
		t.Errorf("left after the purge: %s, want %s", got, dead[2])
	}
	e.Fixed.Store(true)
	br.do("select all", 10*time.Second, chromedp.Click(chromedp.ID("dead-select-all")))
	br.waitJS("one selected", `document.getElementById("dead-bulk-count").textContent === "1 selected"`, 10*time.Second)
	br.do("replay", 10*time.Second, chromedp.Click(chromedp.ID("dead-bulk-replay")), chromedp.WaitVisible(chromedp.ID("confirm-ok")),
		chromedp.Click(chromedp.ID("confirm-ok")))
	e.WaitState(dead[2], ledger.Completed)
	for _, id := range dead[:2] {
		if ev := lastEventOf(t, e, id); ev.Reason != "purged" {
			t.Errorf("purged %s: last event %+v", id, ev)
		}
	}

	// Tasks: select the two delayed ones (live), cancel them.
	br.do("open tasks", 20*time.Second, chromedp.Click(chromedp.ID("tab-tasks")))
	br.waitJS("live tasks selectable", `document.querySelectorAll('input[data-testid="task-select"]').length === 2`, 15*time.Second)
	br.do("select all tasks", 10*time.Second, chromedp.Click(chromedp.ID("tasks-select-all")))
	br.waitJS("two tasks selected", `document.getElementById("tasks-bulk-count").textContent === "2 selected"`, 10*time.Second)
	checkFits(t, br, "tasks with the bulk bar")
	br.do("cancel them", 10*time.Second, chromedp.Click(chromedp.ID("tasks-bulk-cancel")), chromedp.WaitVisible(chromedp.ID("confirm-ok")),
		chromedp.SendKeys(chromedp.ID("confirm-input"), "not needed"), chromedp.Click(chromedp.ID("confirm-ok")))
	for _, id := range later {
		if tk := e.WaitState(id, ledger.Cancelled); tk.LastError == "" && !strings.Contains(lastEventOf(t, e, id).Detail, "not needed") {
			t.Errorf("cancelled %s without the reason: %+v", id, tk)
		}
	}

	// A tenant's token: no history, and why.
	br.do("sign out", 20*time.Second, chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("token-input")))
	br.do("sign in as acme", 30*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.getElementById("token-input").value = ""`),
		chromedp.SendKeys(chromedp.ID("token-input"), admintest.AcmeSecret),
		chromedp.Click(chromedp.ID("token-submit")))
	br.do("open lanes", 20*time.Second, chromedp.Click(chromedp.ID("tab-lanes")))
	br.waitJS("the tenant is told why", `!document.getElementById("history-note").hidden && document.getElementById("history-note").textContent.includes("tenant-scoped")`, 15*time.Second)
	br.waitJS("no chart for the tenant", `document.querySelectorAll('svg[data-testid="history-chart"]').length === 0 && document.getElementById("history-processed").textContent === "–"`, 15*time.Second)
}

// checkFits fails t when the page is wider than the 390 px viewport or
// the header wraps.
func checkFits(t *testing.T, br *browser, what string) {
	t.Helper()
	if w := evalIn[int](br, "page width", `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("%s at 390 px: the page is %d px wide (something overflows)", what, w)
	}
	if h := evalIn[int](br, "header height", `document.querySelector("header.top").scrollHeight`); h > 52 {
		t.Errorf("%s at 390 px: the header is %d px high (it wraps)", what, h)
	}
}

// lastEventOf is task id's last ledger event.
func lastEventOf(t *testing.T, e *admintest.Env, id string) ledger.Event {
	t.Helper()
	es, err := e.L.Events(e.Ctx, id)
	if err != nil || len(es) == 0 {
		t.Fatalf("events of %s: %v %v", id, es, err)
	}
	return es[len(es)-1]
}
