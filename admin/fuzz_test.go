package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
)

// FuzzParseTokens: no tokens file makes the parser panic; refusals are
// broker.ErrInvalid (or a line too long to read) and quote no field that
// could be a secret; accepted tokens are valid and parse the same when
// written back.
func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{
		"# name role [tenant] secret\nops admin 0123456789abcdef0\nviewer read 0123456789abcdef1\n\nproducer enqueue acme 0123456789abcdef2\n",
		"ops admin", "ops root 0123456789abcdef0", "ops admin short", "a b c d e",
		"ops 0123456789abcdef0 admin", "0123456789abcdef0 admin ops", "ops admin 0123456789abcdef0 acme",
		"ops\u00a0admin 0123456789abcdef0", "ops\u2028admin\u2028x0123456789abcdef", "\r\n\t#\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		toks, err := ParseTokens(strings.NewReader(s))
		if err != nil {
			if !errors.Is(err, broker.ErrInvalid) && !errors.Is(err, bufio.ErrTooLong) {
				t.Fatalf("ParseTokens(%q) = %v, not ErrInvalid", s, err)
			}
			for _, field := range strings.Fields(s) {
				if len(field) >= MinSecretLen && strings.Contains(err.Error(), field) {
					t.Fatalf("ParseTokens(%q) = %v: the error quotes a field that may be a secret", s, err)
				}
			}
			return
		}
		var back strings.Builder
		for _, tk := range toks {
			if err := tk.validate(); err != nil {
				t.Fatalf("ParseTokens(%q) accepted %+v: %v", s, tk, err)
			}
			back.WriteString(tk.Name + " " + string(tk.Role) + " ")
			if tk.Tenant != "" {
				back.WriteString(tk.Tenant + " ")
			}
			back.WriteString(tk.Secret + "\n")
		}
		again, err := ParseTokens(strings.NewReader(back.String()))
		if err != nil || len(again) != len(toks) {
			t.Fatalf("ParseTokens(%q) = %+v; written back: %+v, %v", s, toks, again, err)
		}
		for i := range toks {
			if again[i] != toks[i] {
				t.Fatalf("ParseTokens(%q) = %+v; written back: %+v", s, toks, again)
			}
		}
	})
}

// FuzzDecodeIngest: no ingestion body makes the request decoder or the
// request's validation panic; the decoder refuses with a 400 apiError,
// validation with broker.ErrInvalid.
func FuzzDecodeIngest(f *testing.F) {
	for _, s := range []string{
		`{"kind": "mail.send", "args": {"to": "ada@example.com"}, "lane": "interactive", "tenant": "acme", "ordering_key": "c-17",
		 "run_at": "2026-11-29T18:00:00Z", "deadline": "2026-11-30T00:00:00Z", "max_attempts": 5, "metadata": {"source": "checkout"}}`,
		`{"kind": "pdf.parse", "delay": "90s"}`, `{"kind": "pdf.parse", "delay_ms": 90000}`, `{"kind": "pdf.parse" "args": {}}`,
		`{"kind": "pdf.parse"`, `[1, 2]`, `{"kind": "pdf.parse", "colour": "red"}`, `{"kind": "nope"}`, `{"args": {}}`,
		`{"kind": "mail.send", "args": {}}`, `{"kind": "pdf.parse", "args": [1]}`, `{"kind": "pdf.parse", "run_at": "tomorrow"}`,
		`{"kind": "pdf.parse", "max_attempts": "3"}`, `{"kind": "pdf.parse"} {}`, ``, `{"kind": "pdf.parse", "lane": "batch:fair-3"}`,
		`{"kind": "pdf.parse", "metadata": {"switchyard-x": "1"}}`, `{"kind": "pdf.parse", "max_attempts": -1, "delay": "-1m"}`,
		`{"kind": "pdf.parse", "args": {"a": 1e999}}`, `{"kind": "pdf.parse", "tenant": "globex"}`,
	} {
		f.Add(s)
	}
	b, err := broker.Open(context.Background(), "mem://fuzzingest", nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { b.Close() })
	o, err := New(Config{Broker: b, Kinds: map[string]KindSpec{
		"pdf.parse": {},
		"mail.send": {Lane: "interactive", Lanes: []string{"batch"}, Validate: func(a json.RawMessage) error {
			var v struct{ To string }
			if json.Unmarshal(a, &v) != nil || v.To == "" {
				return errors.New("to is required")
			}
			return nil
		}},
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/tasks", strings.NewReader(s))
		var body ingestJSON
		if err := decodeBody(r, &body, false); err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != http.StatusBadRequest {
				t.Fatalf("decodeBody(%q) = %v, not a 400", s, err)
			}
			return
		}
		for _, sc := range []Scope{{}, {Tenant: "acme"}} {
			body.IdempotencyKey = "k"
			if _, _, err := o.enqueueArgs(sc, body.EnqueueRequest); err != nil && !errors.Is(err, broker.ErrInvalid) {
				t.Fatalf("enqueueArgs(%q) = %v, not ErrInvalid", s, err)
			}
		}
	})
}
