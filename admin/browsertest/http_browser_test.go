package browsertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/ledger"
)

// chromiumPath is where Debian's chromium package puts the browser.
const chromiumPath = "/usr/bin/chromium"

// browser drives one headless Chromium tab; every wait is bounded.
type browser struct {
	t    *testing.T
	ctx  context.Context
	dir  string // screenshots
	shot int
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_BROKERS") == "1" {
			t.Fatalf("headless Chromium is required (SWITCHYARD_REQUIRE_BROKERS=1) but %s is missing: apt-get install -y chromium", chromiumPath)
		}
		t.Skipf("the dashboard's browser test needs Debian's chromium at %s (apt-get install -y chromium); skipping", chromiumPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium-profile")),
		chromedp.WindowSize(1440, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// The first Do starts the browser and ties it to bctx, so it cannot
	// carry a timeout itself: a watchdog bounds it instead.
	watchdog := time.AfterFunc(90*time.Second, cancelAlloc)
	err := chromedp.Do(bctx)
	if !watchdog.Stop() {
		t.Fatalf("Chromium did not start within 90 s: %v", err)
	}
	if err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	dir := t.TempDir()
	if keep := os.Getenv("SWITCHYARD_SCREENSHOT_DIR"); keep != "" {
		dir = keep
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
	return &browser{t: t, ctx: bctx, dir: dir}
}

// do runs actions within d; on failure it saves a screenshot and fails
// the test.
func (b *browser) do(what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.screenshot("failed-" + what)
		b.t.Fatalf("%s: %v", what, err)
	}
}

// click clicks the element sel finds, again if the page re-rendered it
// between the lookup and the click (the dashboard polls every 2 s).
func click(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		var err error
		for i := 0; i < 3; i++ {
			if _, err = chromedp.Click(chromedp.CSS(sel))(ctx, t); err == nil || ctx.Err() != nil {
				return chromedp.Void{}, err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return chromedp.Void{}, err
	}
}

// eval evaluates a JavaScript expression (awaiting a promise) within 20 s.
func evalIn[T any](b *browser, what, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.screenshot("failed-" + what)
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitJS waits until a JavaScript expression is truthy, within d.
func (b *browser) waitJS(what, expr string, d time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(d)))
	if err != nil {
		b.screenshot("failed-" + what)
		b.t.Fatalf("%s: waited %s for %s: %v", what, d, expr, err)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return evalIn[string](b, "text of "+sel, fmt.Sprintf(`(document.querySelector(%q) || {textContent: "<missing>"}).textContent`, sel))
}

func (b *browser) screenshot(name string) {
	b.shot++
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.dir, fmt.Sprintf("%02d-%s.png", b.shot, name))
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("saving %s: %v", p, err)
	}
}

// TestDashboard_Browser is the end-to-end acceptance: headless
// Chromium loads the dashboard against a live embedded broker with tasks in
// several states, checks that the lanes, a dead letter's reason and a task
// timeline render, replays a dead letter through the UI and sees it
// complete; without a token the API refuses, and the read-only token is
// refused replay.
func TestDashboard_Browser(t *testing.T) {
	e := admintest.New(t, "/admin")
	br := newBrowser(t)

	// Tasks in several states: completed, dead (twice), awaiting review,
	// queued for later.
	done := e.Enqueue(admintest.GreetArgs{Name: "grace"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	dead := e.Enqueue(admintest.FlakyArgs{Item: "sku-42"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.WaitDead("batch", dead, 1)
	dead2 := e.Enqueue(admintest.FlakyArgs{Item: "sku-99"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.WaitDead("batch", dead2, 2)
	review := e.Enqueue(admintest.RefundArgs{Order: "R-7", Amount: 4200}, &switchyard.EnqueueOpts{Lane: "interactive"})
	later := e.Enqueue(admintest.GreetArgs{Name: "later"}, &switchyard.EnqueueOpts{Delay: time.Hour})
	e.WaitState(done, ledger.Completed)
	e.WaitState(review, ledger.AwaitingReview)
	e.WaitState(later, ledger.Queued)

	page := e.Server.URL + "/admin/"
	br.do("load the dashboard", 30*time.Second,
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.ID("token-input")))
	br.screenshot("sign-in")

	// Without a token the API refuses.
	if st := evalIn[int](br, "fetch without a token", `fetch("api/v1/lanes").then(r => r.status)`); st != 401 {
		t.Errorf("GET lanes without a token from the page: %d, want 401", st)
	}

	// A token that may only enqueue is turned away with a reason.
	br.do("sign in with the enqueue token", 20*time.Second,
		chromedp.SendKeys(chromedp.ID("token-input"), admintest.EnqueueSecret),
		chromedp.Click(chromedp.ID("token-submit")))
	br.waitJS("the enqueue token is refused", `document.getElementById("token-error").textContent.includes("only enqueue")`, 10*time.Second)

	// Sign in as admin; the lanes render.
	br.do("sign in", 30*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.getElementById("token-input").value = ""`),
		chromedp.SendKeys(chromedp.ID("token-input"), admintest.AdminSecret),
		chromedp.Click(chromedp.ID("token-submit")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="lane-batch"]`)))
	for _, lane := range []string{"interactive", "scheduled", "batch", "human-review"} {
		if n := evalIn[int](br, "lane card", fmt.Sprintf(`document.querySelectorAll('[data-testid="lane-%s"]').length`, lane)); n != 1 {
			t.Errorf("lane %s: %d cards, want 1", lane, n)
		}
	}
	if who := br.text("#whoami"); !strings.Contains(who, "ops-admin") || !strings.Contains(who, "admin") {
		t.Errorf("whoami chip %q", who)
	}
	br.waitJS("batch lane shows its dead letters", `document.querySelector('[data-testid="lane-batch"]').textContent.includes("2 dead")`, 10*time.Second)
	br.waitJS("scheduled lane shows the delayed task", `document.querySelector('[data-testid="lane-scheduled"] [data-testid="lane-depth"]').textContent === "1"`, 10*time.Second)
	// Two polls give the trend line its first segment.
	br.waitJS("sparkline", `document.querySelector('[data-testid="lane-batch"] svg.spark polyline') !== null`, 15*time.Second)
	// A lane card names who last paused or resumed the lane.
	if err := e.Client.PauseLane(e.Ctx, "scheduled", "operator:zoe"); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.ResumeLane(e.Ctx, "scheduled", "operator:zoe"); err != nil {
		t.Fatal(err)
	}
	br.waitJS("scheduled lane shows its last resume", `((document.querySelector('[data-testid="lane-scheduled"] [data-testid="lane-last"]') || {}).textContent || "").startsWith("resumed by operator:zoe")`, 10*time.Second)
	br.screenshot("lanes")

	// The dead-letter browser shows the reason and the error.
	br.do("open dead letters", 20*time.Second,
		chromedp.Click(chromedp.ID("tab-dead")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+dead+`"]`)))
	if r := br.text(`tr[data-id="` + dead + `"] [data-testid="dead-reason"]`); r != "max_attempts" {
		t.Errorf("dead letter reason %q, want max_attempts", r)
	}
	if s := br.text(`tr[data-id="` + dead + `"] [data-testid="dead-error"]`); !strings.Contains(s, admintest.FlakyErrorText) {
		t.Errorf("dead letter error %q, want %q", s, admintest.FlakyErrorText)
	}
	br.screenshot("dead-letters")

	// A task's timeline: open the completed task from the task list.
	br.do("open the completed task", 20*time.Second,
		chromedp.Click(chromedp.ID("tab-tasks")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+done+`"] a`)),
		click(`tr[data-id="`+done+`"] a`),
		chromedp.WaitVisible(chromedp.CSS(`#task-timeline li[data-testid="timeline-event"]`)))
	br.waitJS("completed task view", `document.getElementById("task-id").textContent === "`+done+`" && document.getElementById("task-state").textContent === "completed"`, 10*time.Second)
	reasons := evalIn[[]string](br, "timeline reasons", `Array.from(document.querySelectorAll('#task-timeline [data-testid="event-reason"]')).map(e => e.textContent)`)
	if len(reasons) < 3 || reasons[0] != "enqueued" {
		t.Errorf("timeline reasons %v, want enqueued first and at least 3 events", reasons)
	}
	if s := br.text(`#task-effects tbody`); !strings.Contains(s, "greet/grace") || !strings.Contains(s, "confirmed") {
		t.Errorf("effects %q, want greet/grace confirmed", s)
	}
	if s := br.text(`#task-result`); !strings.Contains(s, "hello grace") {
		t.Errorf("result %q", s)
	}
	br.screenshot("task-timeline")
	if n := evalIn[int](br, "no cancel button on a finished task", `document.getElementById("task-cancel").hidden ? 0 : 1`); n != 0 {
		t.Errorf("a completed task shows the Cancel button")
	}

	// Cancel the delayed task from its task view; the result panel says
	// why there is no result.
	br.do("open the delayed task", 20*time.Second,
		chromedp.Evaluate[chromedp.Void](`location.hash = "#task/`+later+`"`),
		chromedp.WaitVisible(chromedp.ID("task-cancel")))
	// A queued task has run no attempt: the view names the attempt it is
	// lined up for, not an attempt count.
	br.waitJS("the delayed task's meta names its next attempt",
		`document.getElementById("task-meta").textContent.includes("next attempt") && document.getElementById("task-meta").textContent.includes("next 1")`, 20*time.Second)
	br.do("cancel it", 20*time.Second,
		click(`[data-testid="task-cancel"]`),
		chromedp.WaitVisible(chromedp.ID("confirm-input")),
		chromedp.SendKeys(chromedp.ID("confirm-input"), "cancelled in the browser test"),
		chromedp.Click(chromedp.ID("confirm-ok")))
	br.waitJS("the task view shows it cancelled",
		`document.getElementById("task-id").textContent === "`+later+`" && document.getElementById("task-state").textContent === "cancelled" && document.getElementById("task-cancel").hidden`, 20*time.Second)
	if s := br.text(`#task-result`); !strings.Contains(s, "cancelled") {
		t.Errorf("result panel of a cancelled task %q", s)
	}
	br.screenshot("task-cancelled")
	if tk := e.WaitState(later, ledger.Cancelled); !strings.Contains(tk.LastError, "cancelled in the browser test") {
		t.Errorf("cancelled task's error %q", tk.LastError)
	}

	// The review queue: approve through the UI.
	br.do("approve the review", 30*time.Second,
		chromedp.Click(chromedp.ID("tab-reviews")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="approve-`+review+`"]`)))
	br.screenshot("reviews")
	br.do("approve the review", 30*time.Second,
		click(`[data-testid="approve-`+review+`"]`),
		chromedp.WaitVisible(chromedp.ID("confirm-input")),
		chromedp.SendKeys(chromedp.ID("confirm-input"), "approved in the browser test"),
		chromedp.Click(chromedp.ID("confirm-ok")),
		chromedp.WaitNotPresent(chromedp.CSS(`[data-testid="review-`+review+`"]`)))
	e.WaitState(review, ledger.Completed)

	// Replay the dead letter through the UI, now that its handler works,
	// and watch it complete.
	e.Fixed.Store(true)
	br.do("replay the dead letter", 30*time.Second,
		chromedp.Click(chromedp.ID("tab-dead")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="replay-`+dead+`"]`)),
		click(`[data-testid="replay-`+dead+`"]`),
		chromedp.WaitVisible(chromedp.ID("confirm-ok")))
	br.screenshot("confirm-replay")
	br.do("confirm the replay", 20*time.Second, chromedp.Click(chromedp.ID("confirm-ok")))
	br.waitJS("the replayed task completes in the task view",
		`document.getElementById("task-id").textContent === "`+dead+`" && document.getElementById("task-state").textContent === "completed"`, 30*time.Second)
	br.screenshot("replayed")
	e.WaitState(dead, ledger.Completed)
	evs, err := e.L.Events(e.Ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	byToken := false
	for _, ev := range evs {
		byToken = byToken || (ev.From == ledger.Dead && ev.Actor == "token:ops-admin")
	}
	if !byToken {
		t.Errorf("no replay event by token:ops-admin in %+v", evs)
	}

	// The read-only token: it sees the other dead letter without the
	// buttons, and the API refuses its replay.
	br.do("sign in read-only", 30*time.Second,
		chromedp.Click(chromedp.ID("signout")),
		chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), admintest.ReadSecret),
		chromedp.Click(chromedp.ID("token-submit")),
		chromedp.WaitNotVisible(chromedp.ID("token-input")))
	br.do("read-only dead letters", 20*time.Second,
		chromedp.Click(chromedp.ID("tab-dead")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+dead2+`"]`)))
	if vis := evalIn[bool](br, "replay button hidden", `document.querySelector('[data-testid="replay-`+dead2+`"]').offsetParent !== null`); vis {
		t.Errorf("the read-only session shows a replay button")
	}
	st := evalIn[int](br, "read-only replay", fmt.Sprintf(`fetch("api/v1/dead/replay", {method: "POST",
		headers: {"Authorization": "Bearer %s", "Content-Type": "application/json"},
		body: JSON.stringify({ids: [%q]})}).then(r => r.status)`, admintest.ReadSecret, dead2))
	if st != 403 {
		t.Errorf("replay with the read-only token from the page: %d, want 403", st)
	}
	br.screenshot("read-only")
	if s, err := e.B.Stats(e.Ctx, "batch"); err != nil || s.DeadLettered != 1 {
		t.Errorf("batch after the refused replay: %+v, %v; want the one dead letter left", s, err)
	}
	if tk := e.WaitState(dead2, ledger.Dead); tk.State != ledger.Dead {
		t.Errorf("dead2 is %s", tk.State)
	}
}
