package ledger

import (
	"context"
	"net/url"
	"strings"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/registry"
)

// Opener opens a store from a parsed DSN. Openers reject unknown query
// parameters with broker.ErrInvalid (broker.Query does this) and never put
// credentials in errors (broker.Redact helps).
type Opener func(ctx context.Context, u *url.URL) (Ledger, error)

var openers = registry.New[Opener]("ledger")

// Register makes a store available under a DSN scheme. Store packages call
// it from init: importing ledger/sqlite registers "sqlite", importing
// ledger/postgres registers "postgres" and "postgresql". Registering a
// scheme twice panics: it is a programming error found at start-up.
func Register(scheme string, o Opener) {
	if o == nil {
		panic("ledger: nil opener for scheme " + strings.ToLower(scheme))
	}
	openers.Register(scheme, o)
}

// Schemes lists the registered DSN schemes, sorted.
func Schemes() []string { return openers.Schemes() }

// Open opens the store named by dsn through the scheme registry, for
// example
//
//	sqlite:///var/lib/switchyard/ledger.db
//	sqlite:ledger.db
//	sqlite::memory:
//	postgres://user:pass@db.internal:5432/app?sslmode=require&schema=switchyard
//
// The store's package must be imported. Errors are classified like broker
// errors: a malformed DSN or an unknown scheme or parameter matches
// broker.ErrInvalid; a store that cannot be reached matches
// broker.ErrTransient. Credentials never appear in error text.
func Open(ctx context.Context, dsn string) (Ledger, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		// url.Error repeats the DSN, credentials included: drop it.
		return nil, broker.Invalidf("ledger DSN does not parse as a URL")
	}
	if u.Scheme == "" {
		return nil, broker.Invalidf("ledger DSN %q has no scheme; registered schemes: %s", broker.Redact(u), strings.Join(Schemes(), ", "))
	}
	o, _ := openers.Lookup(u.Scheme)
	if o == nil {
		return nil, broker.Invalidf("unknown ledger DSN scheme %q; registered schemes: %s (is the store's package imported?)", u.Scheme, strings.Join(Schemes(), ", "))
	}
	return o(ctx, u)
}
