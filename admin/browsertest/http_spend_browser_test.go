package browsertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/spend"
)

// fixedSpend reports two groups in the query's first bucket.
type fixedSpend struct{}

func (fixedSpend) SpendSeries(ctx context.Context, q spend.SeriesQuery) ([]spend.SeriesRow, error) {
	return []spend.SeriesRow{
		{Bucket: 0, Group: map[string]string{"tenant": "acme", "model": "gpt-a"}, Calls: 3, Usage: spend.Usage{Input: 100, CachedInput: 300, Output: 30}, Cost: 1_234_567},
		{Bucket: 0, Group: map[string]string{"tenant": "globex", "model": "gpt-b"}, Calls: 1, Usage: spend.Usage{Input: 10, Output: 1}, Cost: 70},
	}, nil
}

// TestDashboard_Spend: the Spend view lists spend by tenant and model with
// the total, and without a spend store says why.
func TestDashboard_Spend(t *testing.T) {
	e := admintest.NewWithSpend(t, "/admin", fixedSpend{})
	br := newBrowser(t)
	br.do("load the dashboard", 30*time.Second,
		chromedp.Navigate(e.Server.URL+"/admin/"),
		chromedp.WaitVisible(chromedp.ID("token-input")))
	br.do("sign in as reader", 30*time.Second,
		chromedp.SendKeys(chromedp.ID("token-input"), admintest.ReadSecret),
		chromedp.Click(chromedp.ID("token-submit")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="lane-batch"]`)))
	br.do("open spend", 20*time.Second, chromedp.Click(chromedp.ID("tab-spend")))
	br.waitJS("two spend rows", `document.querySelectorAll('[data-testid="spend-row"]').length === 2`, 15*time.Second)
	if s := br.text(`tr[data-tenant="acme"]`); !strings.Contains(s, "gpt-a") || !strings.Contains(s, "$1.234567") || !strings.Contains(s, "75.0%") {
		t.Errorf("acme's row: %q", s)
	}
	if s := br.text(`[data-testid="spend-total"]`); s != "$1.234637" {
		t.Errorf("total %q, want $1.234637", s)
	}
	if n := evalIn[int](br, "bars", `document.querySelectorAll('#spend-chart rect').length`); n != 24 {
		t.Errorf("%d bars for the last 24 hours, want 24", n)
	}

	bare := admintest.New(t, "/admin")
	br.do("load a dashboard without a spend store", 30*time.Second,
		chromedp.Navigate(bare.Server.URL+"/admin/#spend"),
		chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), admintest.ReadSecret),
		chromedp.Click(chromedp.ID("token-submit")))
	br.waitJS("the reason is shown", `document.getElementById("spend-empty").textContent.includes("no spend store")`, 15*time.Second)
}
