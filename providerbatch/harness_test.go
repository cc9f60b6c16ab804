package providerbatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdka "github.com/anthropics/anthropic-sdk-go/v2"
	opta "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go/v3"
	opto "github.com/openai/openai-go/v3/option"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/providerbatch"
	pbanthropic "github.com/switchyard-dev/switchyard/providerbatch/anthropic"
	"github.com/switchyard-dev/switchyard/providerbatch/fakeprovider"
	pbopenai "github.com/switchyard-dev/switchyard/providerbatch/openai"
	"github.com/switchyard-dev/switchyard/providerbatch/sqlstore"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/spend"
)

const testModel = "test-model"

// testPrices: $2.50 input, $1.25 cached input, $10 output per million
// tokens, half price in batches.
func testPrices(t testing.TB) *spend.Table {
	p := spend.Price{Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000, BatchDiscount: 5000}
	tab, err := spend.NewTable(map[string]spend.Price{"openai/" + testModel: p, "anthropic/" + testModel: p})
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// providers are the adapters every case runs on.
var providers = []string{"openai", "anthropic"}

func newProvider(fake *fakeprovider.Server, name string) providerbatch.Provider {
	if name == "openai" {
		return pbopenai.New(oai.NewClient(opto.WithBaseURL(fake.URL+"/v1/"), opto.WithAPIKey("test"), opto.WithMaxRetries(0)))
	}
	return pbanthropic.New(sdka.NewClient(opta.WithBaseURL(fake.URL), opta.WithAPIKey("test"), opta.WithMaxRetries(0)))
}

// params is a request body for provider: a shared prefix and a text.
func params(provider, prefix, text string) json.RawMessage {
	var v any
	if provider == "openai" {
		v = map[string]any{"model": testModel, "max_tokens": 16, "messages": []any{
			map[string]any{"role": "system", "content": prefix}, map[string]any{"role": "user", "content": text}}}
	} else {
		v = map[string]any{"model": testModel, "max_tokens": 16, "system": prefix,
			"messages": []any{map[string]any{"role": "user", "content": text}}}
	}
	b, _ := json.Marshal(v)
	return b
}

// request is the Request for a task whose prompt is prefix+text: the
// estimate is exact (the fake bills ceil(len/4) per part, 16 output).
func request(provider, prefix, text, cacheKey string) providerbatch.Request {
	return providerbatch.Request{Model: testModel, Params: params(provider, prefix, text),
		InputTokens: int64((len(prefix)+3)/4 + (len(text)+3)/4), MaxOutputTokens: 16, CacheKey: cacheKey}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

type env struct {
	fake  *fakeprovider.Server
	store *sqlstore.Store
	b     *providerbatch.Batcher
	clk   *clock
	cfg   providerbatch.Config
	L     ledger.Ledger
}

func newEnv(t testing.TB, provider string, tune func(*providerbatch.Config)) *env {
	t.Helper()
	ctx := context.Background()
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
	fake := fakeprovider.New()
	t.Cleanup(fake.Close)
	clk := &clock{t: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	cfg := providerbatch.Config{Provider: newProvider(fake, provider), Store: st, Prices: testPrices(t), MaxItems: 100,
		MaxAge: time.Minute, PollInterval: 10 * time.Second, Now: clk.now, Logger: slog.New(slog.DiscardHandler)}
	if tune != nil {
		tune(&cfg)
	}
	b, err := providerbatch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{fake: fake, store: st, b: b, clk: clk, cfg: cfg, L: L}
}

type outcome struct {
	resp *providerbatch.Response
	err  error
}

// run drives jobs as the scheduler would: every round each unfinished
// job's handler runs once (a snoozed task comes back), then the clock
// moves on by the poll interval. It stops when every job has an outcome,
// or fails after rounds.
func (e *env) run(t testing.TB, jobs []*scheduler.Job, reqs []providerbatch.Request, rounds int) []outcome {
	t.Helper()
	ctx := context.Background()
	out := make([]outcome, len(jobs))
	done := make([]bool, len(jobs))
	left := len(jobs)
	for r := 0; r < rounds && left > 0; r++ {
		for i, j := range jobs {
			if done[i] {
				continue
			}
			resp, err := e.b.Do(ctx, j, reqs[i])
			if err != nil && scheduler.ResultClass(err) == "snooze" {
				continue
			}
			out[i], done[i] = outcome{resp, err}, true
			left--
		}
		e.clk.advance(e.cfg.PollInterval)
	}
	if left > 0 {
		t.Fatalf("%d of %d jobs unfinished after %d rounds", left, len(jobs), rounds)
	}
	return out
}

func jobs(n int, tenant string) []*scheduler.Job {
	js := make([]*scheduler.Job, n)
	for i := range js {
		js[i] = &scheduler.Job{ID: fmt.Sprintf("task-%04d", i), Kind: "summarize", Tenant: tenant, Lane: providerbatch.Lane}
	}
	return js
}

// textOf returns the assistant text of a response body.
func textOf(t *testing.T, provider string, body json.RawMessage) string {
	t.Helper()
	if provider == "openai" {
		var c oai.ChatCompletion
		if err := json.Unmarshal(body, &c); err != nil || len(c.Choices) == 0 {
			t.Fatalf("decode completion %s: %v", body, err)
		}
		return c.Choices[0].Message.Content
	}
	var m sdka.Message
	if err := json.Unmarshal(body, &m); err != nil || len(m.Content) == 0 {
		t.Fatalf("decode message %s: %v", body, err)
	}
	return m.Content[0].Text
}

func isClass(err error, class string) bool { return err != nil && scheduler.ResultClass(err) == class }

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

var _ = errors.Is

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// newProviderURL is newProvider for a fake at url (in another process).
func newProviderURL(url, name string) providerbatch.Provider {
	if name == "openai" {
		return pbopenai.New(oai.NewClient(opto.WithBaseURL(url+"/v1/"), opto.WithAPIKey("test"), opto.WithMaxRetries(0)))
	}
	return pbanthropic.New(sdka.NewClient(opta.WithBaseURL(url), opta.WithAPIKey("test"), opta.WithMaxRetries(0)))
}
