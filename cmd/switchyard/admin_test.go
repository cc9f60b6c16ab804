package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// adminBuffer is a bytes.Buffer the command and the test share.
type adminBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *adminBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *adminBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCLI_Admin starts `switchyard admin` on a free port with a tokens
// file, calls it, and stops it as a signal would (by cancelling its
// context).
func TestCLI_Admin(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	const secret = "cli-admin-secret-00000001"
	if err := os.WriteFile(tokens, []byte("# operators\nops admin "+secret+"\nbot enqueue acme cli-enqueue-secret-000002\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb adminBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"admin", "--broker", "embedded://" + filepath.Join(dir, "q.db"),
			"--ledger", "sqlite://" + filepath.Join(dir, "ledger.db"), "--listen", "127.0.0.1:0",
			"--tokens-file", tokens, "--kinds", "report.build=batch,mail.send", "--create"}, &out, &errb)
	}()
	re := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+)/`)
	base := ""
	for i := 0; i < 600 && base == ""; i++ {
		select {
		case code := <-done:
			t.Fatalf("admin exited with %d: %s %s", code, out.String(), errb.String())
		default:
		}
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if base == "" {
		t.Fatalf("admin never printed its URL: %q %q", out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "2 token(s) from "+tokens) {
		t.Errorf("startup line %q does not say where the tokens came from", out.String())
	}
	get := func(path, token string, body string) (int, string) {
		t.Helper()
		method, rd := "GET", io.Reader(nil)
		if body != "" {
			method, rd = "POST", strings.NewReader(body)
		}
		req, _ := http.NewRequestWithContext(ctx, method, base+path, rd)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "k1")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		data, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(data)
	}
	if code, _ := get("/healthz", "", ""); code != 200 {
		t.Errorf("healthz: %d", code)
	}
	if code, body := get("/readyz", "", ""); code != 200 {
		t.Errorf("readyz: %d %s", code, body)
	}
	if code, _ := get("/api/v1/lanes", "", ""); code != 401 {
		t.Errorf("lanes without a token: %d", code)
	}
	if code, body := get("/api/v1/lanes", secret, ""); code != 200 || !strings.Contains(body, `"lane":"batch"`) {
		t.Errorf("lanes: %d %s", code, body)
	}
	if code, body := get("/metrics", secret, ""); code != 200 || !strings.Contains(body, "switchyard_lane_ready") {
		t.Errorf("metrics: %d %.300s", code, body)
	}
	// The spend report reads the ledger's spend rows (none yet).
	if code, body := get("/api/v1/spend?since=1h", secret, ""); code != 200 || !strings.Contains(body, `"series":[]`) {
		t.Errorf("spend: %d %s", code, body)
	}
	if code, body := get("/", "", ""); code != 200 || !strings.Contains(body, "Switchyard") {
		t.Errorf("dashboard: %d", code)
	}
	// Ingestion accepts the kinds given, in their lanes, and no other.
	code, body := get("/api/v1/tasks", "cli-enqueue-secret-000002", `{"kind": "report.build", "args": {"month": "2026-11"}}`)
	if code != 202 {
		t.Fatalf("ingest: %d %s", code, body)
	}
	if code, body := get("/api/v1/tasks", "cli-enqueue-secret-000002", `{"kind": "other.kind"}`); code != 400 {
		t.Errorf("ingest of an unlisted kind: %d %s", code, body)
	}
	if code, body := get("/api/v1/tasks?lane=batch", secret, ""); code != 200 || !strings.Contains(body, `"tenant":"acme"`) || !strings.Contains(body, `"kind":"report.build"`) {
		t.Errorf("the ingested task: %d %s", code, body)
	}

	cancel() // as SIGINT does through main's signal.NotifyContext
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("admin exited with %d after the signal: %s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("admin did not shut down within 30 s")
	}
	if !strings.Contains(out.String(), "shutting down") {
		t.Errorf("no shutdown message: %q", out.String())
	}
	if strings.Contains(errb.String(), secret) {
		t.Errorf("a secret is in the log")
	}
	if !strings.Contains(errb.String(), "token=bot") {
		t.Errorf("the audit log does not name the ingesting token: %s", errb.String())
	}
}

// TestCLI_AdminBadInput: the command refuses to start without tokens, with
// a bad tokens file, a bad flag or a bad broker URL.
func TestCLI_AdminBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("ops admin 0123456789abcdef\nops superuser 0123456789abcdef1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# nothing yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("ops admin 0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	q := "embedded://" + filepath.Join(dir, "q.db") + "?create=true"
	t.Setenv(adminEnvTokens, "")
	for _, c := range []struct {
		name string
		code int
		want string
		args []string
	}{
		{"no broker", 2, "missing required flag --broker", []string{"admin"}},
		{"no tokens", 1, "no tokens in $" + adminEnvTokens, []string{"admin", "--broker", q}},
		{"empty tokens file", 1, "no tokens in " + empty, []string{"admin", "--broker", q, "--tokens-file", empty}},
		{"bad tokens file", 1, `line 2: the second field is not a role`, []string{"admin", "--broker", q, "--tokens-file", bad}},
		{"missing tokens file", 1, "tokens file", []string{"admin", "--broker", q, "--tokens-file", filepath.Join(dir, "nope")}},
		{"bad broker URL", 1, "switchyard admin:", []string{"admin", "--broker", "nosuch://x", "--tokens-file", good}},
		{"bad kind", 1, "--kinds", []string{"admin", "--broker", q, "--tokens-file", good, "--kinds", "no spaces"}},
		{"tls half", 1, "go together", []string{"admin", "--broker", q, "--tokens-file", good, "--tls-cert", "x.pem"}},
		{"stray argument", 2, "unexpected argument", []string{"admin", "--broker", q, "extra"}},
		{"bad listen address", 1, "listen on", []string{"admin", "--broker", q, "--tokens-file", good, "--listen", "256.0.0.1:1"}},
	} {
		code, out, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d mentioning %q", c.name, code, errs, c.code, c.want)
		}
		if strings.Contains(out, "dashboard and API at") {
			t.Errorf("%s: it started serving", c.name)
		}
		if strings.Contains(errs, "0123456789abcdef") {
			t.Errorf("%s: a secret is in the error", c.name)
		}
	}
	// A tokens file others can read is served, with a warning.
	t.Setenv(adminEnvTokens, "envop admin env-secret-000000000001;envbot enqueue env-secret-000000000002")
	toks, src, err := adminTokens("", io.Discard)
	if err != nil || len(toks) != 2 || src != "$"+adminEnvTokens || toks[1].Role != "enqueue" {
		t.Errorf("tokens from the environment: %+v %s %v", toks, src, err)
	}
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("ops admin 0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var warn bytes.Buffer
	if toks, _, err := adminTokens(loose, &warn); err != nil || len(toks) != 1 || !strings.Contains(warn.String(), "chmod 600") {
		t.Errorf("a world-readable tokens file: %v %v %q", toks, err, warn.String())
	}
}
