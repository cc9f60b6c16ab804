package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
)

// onRead runs fn at the first read, then reads s: the operator reads the
// preview while more dead letters arrive, then answers.
type onRead struct {
	fn   func()
	r    *strings.Reader
	done bool
}

func (o *onRead) Read(p []byte) (int, error) {
	if !o.done {
		o.done = true
		o.fn()
	}
	return o.r.Read(p)
}

// A confirmed purge acts on the dead letters it showed, not on those that
// arrived while the operator read the list.
func TestCLI_DLQActsOnWhatItShowed(t *testing.T) {
	e := newOpsEnv(t)
	var shown []string
	for i := range 3 {
		shown = append(shown, e.enqueue("batch", "acme", fmt.Sprintf(`{"i":%d}`, i)))
	}
	e.kill("batch", broker.ReasonPermanent, "boom")
	var late []string
	old := stdin
	stdin = &onRead{r: strings.NewReader("y\n"), fn: func() {
		for i := range 2 {
			late = append(late, e.enqueue("batch", "acme", fmt.Sprintf(`{"late":%d}`, i)))
		}
		e.kill("batch", broker.ReasonPermanent, "boom")
	}}
	t.Cleanup(func() { stdin = old })
	code, out, errs := runCLI(t, "dlq", "purge", "--lane", "batch", "--broker", e.url, "--ledger", e.dsn)
	if code != 0 || !strings.Contains(out, "purged 3 dead letter(s)") || !strings.Contains(errs, "purge these 3 dead letters for good?") {
		t.Fatalf("purge: %d\n%s%s", code, out, errs)
	}
	slices.Sort(late)
	if got := e.dead(); !slices.Equal(got, late) {
		t.Errorf("left %v, want the late arrivals %v", got, late)
	}
}

// Every --id is looked up, however many (the default --limit does not cap
// them), and a cut-short preview says the operation runs by filter.
func TestCLI_DLQManyIDs(t *testing.T) {
	e := newOpsEnv(t)
	var ids []string
	for i := range 55 {
		ids = append(ids, e.enqueue("batch", "acme", fmt.Sprintf(`{"i":%d}`, i)))
	}
	e.kill("batch", broker.ReasonPermanent, "boom")
	code, out, errs := runCLI(t, "dlq", "purge", "--id", strings.Join(ids[:52], ","), "--yes", "--broker", e.url, "--ledger", e.dsn)
	if code != 0 || !strings.Contains(out, "purged 52 dead letter(s)") {
		t.Fatalf("purge by 52 ids: %d\n%s%s", code, out, errs)
	}
	if got := e.dead(); len(got) != 3 {
		t.Fatalf("left %d, want 3", len(got))
	}
	// --limit 2 given explicitly: the preview is complete at 2.
	withStdin(t, "n\n")
	code, _, errs = runCLI(t, "dlq", "replay", "--limit", "2", "--broker", e.url, "--ledger", e.dsn)
	if code != 1 || !strings.Contains(errs, "replay these 2 dead letters?") {
		t.Errorf("replay --limit 2: %d %s", code, errs)
	}
}

// Tenant-controlled text reaches the terminal with its control characters
// escaped.
func TestCLI_EscapesControlCharacters(t *testing.T) {
	e := newOpsEnv(t)
	e.enqueue("batch", "acme", `{"x":1}`)
	e.kill("batch", broker.ReasonPermanent, "evil \x1b]52;c;cGF3bmVk\x07 \x1b[2J\u202e done")
	code, out, errs := runCLI(t, "dlq", "ls", "--broker", e.url)
	if code != 0 {
		t.Fatalf("ls: %d %s", code, errs)
	}
	if strings.ContainsAny(out, "\x1b\x07\u202e") {
		t.Errorf("raw control characters on the terminal: %q", out)
	}
	if !strings.Contains(out, `evil \x1b]52;c;cGF3bmVk\x07 \x1b[2J\u202e done`) {
		t.Errorf("the error is not shown escaped: %q", out)
	}
	for in, want := range map[string]string{
		"plain":       "plain",
		"a\\b":        `a\\b`,
		"tab\there":   `tab\there`,
		"bad\xffutf8": `bad\xffutf8`,
		"c1\u009bm":   `c1\x9bm`,
		"é ü 日本":      "é ü 日本",
	} {
		if got := term(in); got != want {
			t.Errorf("term(%q) = %q, want %q", in, got, want)
		}
	}
}
