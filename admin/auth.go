package admin

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/switchyard-dev/switchyard/broker"
)

// Role is what a token may do over HTTP.
type Role string

const (
	// RoleRead may call every GET: lanes, tasks and their timelines, dead
	// letters and reviews, without task arguments.
	RoleRead Role = "read"
	// RoleEnqueue may submit tasks (POST /api/v1/tasks) and read their
	// status (GET /api/v1/tasks/{id}/status), nothing else: the role for a
	// producer service.
	RoleEnqueue Role = "enqueue"
	// RoleAdmin may do everything, sees task arguments, and is the only
	// role that changes state other than by enqueueing.
	RoleAdmin Role = "admin"
)

// Valid reports whether r is one of the known roles.
func (r Role) Valid() bool { return r == RoleRead || r == RoleEnqueue || r == RoleAdmin }

// Token is one bearer token the admin HTTP API accepts.
type Token struct {
	// Name identifies the token in the audit log and, as "token:<Name>",
	// in the task event log. Required; no spaces.
	Name string
	// Secret is what the client sends as "Authorization: Bearer <Secret>".
	// At least 16 bytes.
	Secret string
	// Role is what the token may do.
	Role Role
	// Tenant, when set, scopes the token to one tenant: it never sees or
	// touches another tenant's tasks, dead letters or reviews (they read as
	// not found), and it cannot pause or resume a lane, which every tenant
	// shares. "" sees every tenant.
	Tenant string
}

// MinSecretLen is the shortest secret a Token may have.
const MinSecretLen = 16

func (t Token) validate() error {
	switch {
	case t.Name == "" || strings.ContainsAny(t.Name, " \t\r\n"):
		return fmt.Errorf("token name %q: must be non-empty, without spaces", t.Name)
	case !t.Role.Valid():
		return fmt.Errorf("token %q: unknown role %q (read, enqueue or admin)", t.Name, t.Role)
	case len(t.Secret) < MinSecretLen:
		return fmt.Errorf("token %q: secret shorter than %d bytes", t.Name, MinSecretLen)
	case strings.ContainsAny(t.Secret, " \t\r\n"):
		return fmt.Errorf("token %q: secret contains white space", t.Name)
	}
	return nil
}

// ParseTokens reads tokens, one a line:
//
//	name role [tenant] secret
//
// where role is read, enqueue or admin. Blank lines and lines starting with
// # are ignored. A malformed line is refused with an error matching
// broker.ErrInvalid that names the line and the field but quotes none of
// its fields: in a line whose fields are out of order, any of them may be
// the secret.
func ParseTokens(r io.Reader) ([]Token, error) {
	var out []Token
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := strings.Fields(s)
		var t Token
		switch len(f) {
		case 3:
			t = Token{Name: f[0], Role: Role(f[1]), Secret: f[2]}
		case 4:
			t = Token{Name: f[0], Role: Role(f[1]), Tenant: f[2], Secret: f[3]}
		default:
			return nil, broker.Invalidf("tokens line %d: want \"name role [tenant] secret\", got %d fields", line, len(f))
		}
		switch {
		case !t.Role.Valid():
			return nil, broker.Invalidf("tokens line %d: the second field is not a role (read, enqueue or admin); the form is \"name role [tenant] secret\"", line)
		case len(t.Secret) < MinSecretLen:
			return nil, broker.Invalidf("tokens line %d: the secret (the last field) is shorter than %d bytes", line, MinSecretLen)
		}
		if err := t.validate(); err != nil {
			// Fields split on any Unicode space; validate refuses less.
			return nil, broker.Invalidf("tokens line %d: the name or the secret is malformed", line)
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading tokens: %w", err)
	}
	return out, nil
}

// authenticator checks bearer tokens in constant time.
type authenticator struct {
	tokens []Token
	sums   [][sha256.Size]byte
}

func newAuthenticator(tokens []Token) (*authenticator, error) {
	a := &authenticator{}
	names := map[string]bool{}
	secrets := map[string]bool{}
	for _, t := range tokens {
		if err := t.validate(); err != nil {
			return nil, err
		}
		if names[t.Name] {
			return nil, fmt.Errorf("token name %q used twice", t.Name)
		}
		if secrets[t.Secret] {
			return nil, fmt.Errorf("token %q: secret already used by another token", t.Name)
		}
		names[t.Name], secrets[t.Secret] = true, true
		a.tokens = append(a.tokens, t)
		a.sums = append(a.sums, sha256.Sum256([]byte(t.Secret)))
	}
	return a, nil
}

// lookup returns the token whose secret is presented, or nil. It compares
// SHA-256 digests with subtle.ConstantTimeCompare and always looks at every
// token, so neither the length nor the position of a match shows in the
// timing.
func (a *authenticator) lookup(secret string) *Token {
	sum := sha256.Sum256([]byte(secret))
	found := -1
	for i := range a.sums {
		if subtle.ConstantTimeCompare(sum[:], a.sums[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	return &a.tokens[found]
}

// bearer extracts the token from an Authorization header ("Bearer x",
// scheme case-insensitive).
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

type tokenKey struct{}

// tokenFrom returns the authenticated token of a request (nil for the
// unauthenticated routes).
func tokenFrom(ctx context.Context) *Token {
	t, _ := ctx.Value(tokenKey{}).(*Token)
	return t
}

// access is what a route requires.
type access int

const (
	accessPublic  access = iota // no token
	accessAny                   // any valid token
	accessRead                  // read or admin
	accessStatus                // read, enqueue or admin
	accessEnqueue               // enqueue or admin
	accessAdmin                 // admin
)

func (a access) allows(r Role) bool {
	switch a {
	case accessPublic, accessAny:
		return true
	case accessRead:
		return r == RoleRead || r == RoleAdmin
	case accessStatus:
		return r == RoleRead || r == RoleEnqueue || r == RoleAdmin
	case accessEnqueue:
		return r == RoleEnqueue || r == RoleAdmin
	case accessAdmin:
		return r == RoleAdmin
	}
	return false
}

func (a access) String() string {
	switch a {
	case accessRead:
		return "the read or admin role"
	case accessStatus:
		return "the read, enqueue or admin role"
	case accessEnqueue:
		return "the enqueue or admin role"
	case accessAdmin:
		return "the admin role"
	}
	return "a token"
}
