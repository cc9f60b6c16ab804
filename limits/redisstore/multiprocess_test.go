package redisstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/limits/redisstore"
)

// The shared limit of the multi-process test: 600 requests/min and 60,000
// tokens/min on one key, with buckets of one second's worth (10 requests,
// 1,000 tokens) so that a 15 s phase is dominated by the steady rate, not
// by the initial burst.
const (
	mpRequestsPerMin = 600
	mpTokensPerMin   = 60000
	mpBurstRequests  = 10
	mpBurstTokens    = 1000
	mpPhase          = 15 * time.Second
	mpWarmup         = 2 * time.Second // excluded from the steady-state rate
	mpWorkers        = 3
	mpGoroutines     = 4
	// mpTransit is the fake's allowance for the time between the limiter
	// admitting a call and the call reaching the fake (scheduling, HTTP):
	// the fake's buckets hold this much of the rate beyond the burst.
	mpTransit = 100 * time.Millisecond
	// mpStartup is left for the worker processes to start before the
	// phase begins.
	mpStartup = 1500 * time.Millisecond
)

// fakeProvider is a model API with a provider-style limit: token buckets
// of exactly the shared rates, charging one request and the call's actual
// tokens on arrival, answering 429 with Retry-After when either is short.
type fakeProvider struct {
	mu               sync.Mutex
	start            time.Time
	req, tok         float64
	strictReq        float64 // the same buckets without the transit allowance
	strictTok        float64
	last             time.Time
	ok, rejected     int64
	strictViolations int64
	tokens           int64
	steadyOK         int64
	steadyTokens     int64
}

func newFake() *fakeProvider {
	now := time.Now()
	return &fakeProvider{start: now, last: now,
		req: mpBurstRequests + mpRequestsPerMin/60.0*mpTransit.Seconds(), tok: mpBurstTokens + mpTokensPerMin/60.0*mpTransit.Seconds(),
		strictReq: mpBurstRequests, strictTok: mpBurstTokens}
}

func (f *fakeProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct{ Actual int64 }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	now := time.Now()
	el := max(now.Sub(f.last).Seconds(), 0)
	f.last = now
	rr, tr := mpRequestsPerMin/60.0, mpTokensPerMin/60.0
	f.req = min(f.req+el*rr, mpBurstRequests+rr*mpTransit.Seconds())
	f.tok = min(f.tok+el*tr, mpBurstTokens+tr*mpTransit.Seconds())
	f.strictReq = min(f.strictReq+el*rr, mpBurstRequests)
	f.strictTok = min(f.strictTok+el*tr, mpBurstTokens)
	if f.req < 1 || f.tok < float64(in.Actual) {
		f.rejected++
		retry := max((1-f.req)/rr, (float64(in.Actual)-f.tok)/tr)
		f.mu.Unlock()
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(int64(retry*1000)+1, 10))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	f.req--
	f.tok -= float64(in.Actual)
	f.strictReq--
	f.strictTok -= float64(in.Actual)
	if f.strictReq < -1e-9 || f.strictTok < -1e-9 {
		f.strictViolations++
		f.strictReq, f.strictTok = max(f.strictReq, 0), max(f.strictTok, 0)
	}
	f.ok++
	f.tokens += in.Actual
	if now.Sub(f.start) >= mpWarmup {
		f.steadyOK++
		f.steadyTokens += in.Actual
	}
	f.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]int64{"tokens": in.Actual})
}

// TestMultiProcess_SharedLimit runs 3 worker processes (this test binary
// re-executed) that share one Redis-backed limit, in two phases of 15 s:
// one where the request limit binds (small calls) and one where the token
// limit binds (large calls).
func TestMultiProcess_SharedLimit(t *testing.T) {
	if os.Getenv("LIMITS_MP_CHILD") != "" {
		t.Skip("running as a worker process")
	}
	addr := testenv.Redis.Endpoint(t)
	if testing.Short() {
		t.Skip("takes 30 s; skipped with -short")
	}
	phases := []struct {
		name     string
		min, max int64 // estimate range; the actual is 60–100% of it
		binding  string
	}{
		{"requests-bound", 40, 140, "requests"},
		{"tokens-bound", 150, 350, "tokens"},
	}
	for _, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			s := newStore(t, nil) // for the prefix and the cleanup
			prefix := s.Prefix()
			fake := newFake()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: fake}
			go srv.Serve(ln)
			defer srv.Close()

			// The workers start together once their processes are up.
			start := time.Now().Add(mpStartup)
			deadline := start.Add(mpPhase)
			fake.mu.Lock()
			fake.start, fake.last = start, start
			fake.mu.Unlock()
			var wg sync.WaitGroup
			outs := make([]bytes.Buffer, mpWorkers)
			errs := make([]error, mpWorkers)
			for i := 0; i < mpWorkers; i++ {
				cmd := exec.Command(os.Args[0], "-test.run=^TestMultiProcessWorker$", "-test.count=1")
				cmd.Env = append(os.Environ(), "LIMITS_MP_CHILD=1", "LIMITS_MP_REDIS="+addr, "LIMITS_MP_PREFIX="+prefix,
					"LIMITS_MP_URL=http://"+ln.Addr().String(), "LIMITS_MP_DEADLINE="+strconv.FormatInt(deadline.UnixMicro(), 10),
					"LIMITS_MP_START="+strconv.FormatInt(start.UnixMicro(), 10),
					fmt.Sprintf("LIMITS_MP_RANGE=%d-%d", ph.min, ph.max), fmt.Sprintf("LIMITS_MP_SEED=%d", i))
				cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = cmd.Run()
				}()
			}
			wg.Wait()
			elapsed := mpPhase
			for i, err := range errs {
				if err != nil {
					t.Fatalf("worker %d: %v\n%s", i, err, outs[i].String())
				}
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			steady := elapsed - mpWarmup
			reqRate := float64(fake.ok) / elapsed.Minutes()
			tokRate := float64(fake.tokens) / elapsed.Minutes()
			sReqRate := float64(fake.steadyOK) / steady.Minutes()
			sTokRate := float64(fake.steadyTokens) / steady.Minutes()
			t.Logf("%s: %d workers × %d goroutines for %s: fake accepted %d calls, %d tokens; 429s: %d; strict violations (no transit allowance): %d",
				ph.name, mpWorkers, mpGoroutines, elapsed, fake.ok, fake.tokens, fake.rejected, fake.strictViolations)
			t.Logf("%s: rate over the whole run %.0f req/min, %.0f tokens/min; steady state (after %s) %.0f req/min (limit %d), %.0f tokens/min (limit %d)",
				ph.name, reqRate, tokRate, mpWarmup, sReqRate, mpRequestsPerMin, sTokRate, mpTokensPerMin)
			if fake.rejected != 0 {
				t.Errorf("the fake provider answered 429 %d times: the shared limit was exceeded", fake.rejected)
			}
			limit, got := float64(mpRequestsPerMin), sReqRate
			if ph.binding == "tokens" {
				limit, got = mpTokensPerMin, sTokRate
			}
			if got < 0.9*limit || got > 1.1*limit {
				t.Errorf("steady %s rate %.0f/min is not within 10%% of the limit %.0f/min", ph.binding, got, limit)
			}
			if sReqRate > 1.1*mpRequestsPerMin || sTokRate > 1.1*mpTokensPerMin {
				t.Errorf("a non-binding rate is over its limit: %.0f req/min, %.0f tokens/min", sReqRate, sTokRate)
			}
		})
	}
}

// TestMultiProcessWorker is the worker process of
// TestMultiProcess_SharedLimit; run directly it skips.
func TestMultiProcessWorker(t *testing.T) {
	if os.Getenv("LIMITS_MP_CHILD") == "" {
		t.Skip("helper process of TestMultiProcess_SharedLimit; runs only when re-executed by it")
	}
	us, _ := strconv.ParseInt(os.Getenv("LIMITS_MP_DEADLINE"), 10, 64)
	deadline := time.UnixMicro(us)
	us, _ = strconv.ParseInt(os.Getenv("LIMITS_MP_START"), 10, 64)
	time.Sleep(time.Until(time.UnixMicro(us)))
	var lo, hi int64
	fmt.Sscanf(os.Getenv("LIMITS_MP_RANGE"), "%d-%d", &lo, &hi)
	seed, _ := strconv.ParseUint(os.Getenv("LIMITS_MP_SEED"), 10, 64)
	url := os.Getenv("LIMITS_MP_URL")

	c := redis.NewClient(&redis.Options{Addr: os.Getenv("LIMITS_MP_REDIS"), PoolSize: mpGoroutines * 2})
	defer c.Close()
	s, err := redisstore.New(c, &redisstore.Options{Prefix: os.Getenv("LIMITS_MP_PREFIX")})
	if err != nil {
		t.Fatal(err)
	}
	l, err := limits.New(limits.Config{Store: s, MaxInlineWait: time.Minute, Rules: []limits.Rule{{
		Name: "provider", By: []limits.Field{limits.Provider, limits.Model},
		Limit: limits.Limit{Requests: mpRequestsPerMin, Tokens: mpTokensPerMin, Interval: time.Minute,
			BurstRequests: mpBurstRequests, BurstTokens: mpBurstTokens},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	key := limits.Key{Provider: "fake", Model: "m1"}
	client := &http.Client{Timeout: 5 * time.Second}
	var calls, throttled atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < mpGoroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for ctx.Err() == nil {
				est := lo + rng.Int64N(hi-lo+1)
				actual := est * (60 + rng.Int64N(41)) / 100
				res, err := l.Wait(ctx, limits.Request{Key: key, Tokens: est})
				if err != nil {
					if errors.Is(err, context.DeadlineExceeded) {
						return
					}
					t.Error(err)
					return
				}
				body, _ := json.Marshal(map[string]int64{"Actual": actual})
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					_ = res.Cancel(context.Background())
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					throttled.Add(1)
					ms, _ := strconv.ParseInt(resp.Header.Get("Retry-After-Ms"), 10, 64)
					_ = res.Cancel(context.Background())
					_ = l.Throttle(context.Background(), key, time.Duration(ms)*time.Millisecond)
					continue
				}
				calls.Add(1)
				if err := res.Settle(context.Background(), actual); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("worker %d: %d calls, %d throttled", seed, calls.Load(), throttled.Load())
}
