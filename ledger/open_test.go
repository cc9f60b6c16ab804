package ledger_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

var errOpened = errors.New("opened")

func init() {
	ledger.Register("Test-Scheme", func(ctx context.Context, u *url.URL) (ledger.Ledger, error) {
		return nil, errOpened
	})
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := ledger.Open(ctx, "test-scheme://x"); !errors.Is(err, errOpened) {
		t.Errorf("registered scheme (case-insensitive) not dispatched: %v", err)
	}
	for _, dsn := range []string{"", "no-scheme", "nosuch://u:hunter2@h/db", "%zz://u:hunter2@h", "postgres://u:hunter2@h:bad port/db"} {
		_, err := ledger.Open(ctx, dsn)
		if !errors.Is(err, broker.ErrInvalid) || !errors.Is(err, broker.ErrPermanent) {
			t.Errorf("Open(%q): %v, want a permanent ErrInvalid", dsn, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q) leaked the password: %v", dsn, err)
		}
	}
	found := false
	for _, s := range ledger.Schemes() {
		found = found || s == "test-scheme"
	}
	if !found {
		t.Errorf("Schemes() = %v, missing test-scheme", ledger.Schemes())
	}
}

func TestRegister_Twice(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("registering a scheme twice did not panic")
		}
	}()
	ledger.Register("TEST-SCHEME", func(context.Context, *url.URL) (ledger.Ledger, error) { return nil, nil })
}

// TestCanTransition pins the state machine's table.
func TestCanTransition(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		from, to ledger.State
		ok       bool
	}{
		{ledger.Queued, ledger.Running, true},
		{ledger.Running, ledger.Running, true},
		{ledger.Running, ledger.Completed, true},
		{ledger.RetryWait, ledger.Running, true},
		{ledger.Dead, ledger.Queued, true},
		{ledger.Completed, ledger.Queued, false},
		{ledger.Queued, ledger.Completed, false},
		{ledger.Cancelled, ledger.Running, false},
		{"bogus", ledger.Running, false},
	} {
		if got := ledger.CanTransition(c.from, c.to); got != c.ok {
			t.Errorf("CanTransition(%s, %s) = %v, want %v", c.from, c.to, got, c.ok)
		}
	}
	for s := range ledger.Allowed {
		if !s.Valid() {
			t.Errorf("%s not Valid", s)
		}
		if s.Terminal() && s != ledger.Dead && s != ledger.Failed && len(ledger.Allowed[s]) != 0 {
			t.Errorf("terminal %s has transitions %v", s, ledger.Allowed[s])
		}
	}
}
