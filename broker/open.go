package broker

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/internal/registry"
)

// Opener opens a driver from a parsed URL. Openers must reject unknown query
// parameters (Query does this) and must never put credentials in errors
// (Redact helps).
type Opener func(ctx context.Context, u *url.URL) (Driver, error)

var openers = registry.New[Opener]("broker")

// Register makes a driver available under a URL scheme. Adapters call it
// from init. Registering a scheme twice panics: it is a programming error
// found at start-up, never at run time.
func Register(scheme string, o Opener) { openers.Register(scheme, o) }

// Schemes lists the registered URL schemes, sorted.
func Schemes() []string { return openers.Schemes() }

// OpenDriver opens the driver for rawURL through the scheme registry. The
// adapter's package must be imported (adapters/all imports them all).
func OpenDriver(ctx context.Context, rawURL string) (Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the URL, credentials included: drop it.
		return nil, Invalidf("broker URL does not parse")
	}
	if u.Scheme == "" {
		return nil, Invalidf("broker URL %q has no scheme; registered schemes: %s", Redact(u), strings.Join(Schemes(), ", "))
	}
	o, _ := openers.Lookup(u.Scheme)
	if o == nil {
		return nil, Invalidf("unknown broker URL scheme %q; registered schemes: %s (is the adapter's package imported?)", u.Scheme, strings.Join(Schemes(), ", "))
	}
	return o(ctx, u)
}

// Open opens rawURL and wraps the driver in a Broker with opts (nil means
// defaults).
//
// The URL parameter fair ("?fair=batch:8", see ParseFair) is Broker's, not
// the driver's: it sets Options.Fair (and overrides it) before the rest of
// the URL goes to the driver.
func Open(ctx context.Context, rawURL string, opts *Options) (*Broker, error) {
	if u, err := url.Parse(rawURL); err == nil {
		if q := u.Query(); q.Has("fair") {
			fair, err := ParseFair(q.Get("fair"))
			if err != nil {
				return nil, err
			}
			o := Options{}
			if opts != nil {
				o = *opts
			}
			o.Fair = fair
			opts = &o
			q.Del("fair")
			u.RawQuery = q.Encode()
			rawURL = u.String()
		}
	}
	d, err := OpenDriver(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	b, err := New(d, opts)
	if err != nil {
		d.Close()
		return nil, err
	}
	return b, nil
}

// Redact returns u as a string with any password replaced by "xxxxx" and
// sensitive query parameters masked.
func Redact(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	if c.User != nil {
		if _, has := c.User.Password(); has {
			c.User = url.UserPassword(c.User.Username(), "xxxxx")
		}
	}
	// A pair that does not parse (a bad escape, a ";") is left out of q:
	// re-encode q so that it cannot carry a secret through unmasked.
	q, err := url.ParseQuery(c.RawQuery)
	changed := err != nil
	for k, vs := range q {
		lk := strings.ToLower(k)
		if isSecretParam(lk) {
			q.Set(k, "xxxxx")
			changed = true
			continue
		}
		for i, v := range vs {
			// A nested broker URL (router://?lane.batch=rabbitmq://u:p@h):
			// redact it too.
			if strings.Contains(v, "://") {
				if nu, err := url.Parse(v); err == nil {
					if r := Redact(nu); r != v {
						vs[i], changed = r, true
					}
				} else {
					vs[i], changed = "xxxxx", true
				}
			}
		}
	}
	if changed {
		c.RawQuery = q.Encode()
	}
	out := c.String()
	if r, err := url.Parse(out); err != nil || r.Scheme != c.Scheme || r.Host != c.Host || r.Path != c.Path ||
		r.RawQuery != c.RawQuery || userString(r.User) != userString(c.User) {
		// A URL that does not read back the way it was written (a path
		// that renders as a host or as user information, say) could show
		// a secret in the part that moved: show nothing of it.
		return "(a URL that does not print back unambiguously; redacted)"
	}
	return out
}

func userString(u *url.Userinfo) string {
	if u == nil {
		return ""
	}
	return "u:" + u.String()
}

func isSecretParam(name string) bool {
	for _, w := range []string{"pass", "secret", "token", "credential", "access_key", "accesskey", "auth"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// Query reads typed URL query parameters and reports unknown or malformed
// ones. Use it in an Opener:
//
//	q := broker.NewQuery(u)
//	ns := q.String("namespace", "default")
//	lease := q.Duration("lease", 30*time.Second)
//	if err := q.Finish(); err != nil { return nil, err }
type Query struct {
	vals url.Values
	used map[string]bool
	errs []string
}

// NewQuery starts reading u's query parameters.
func NewQuery(u *url.URL) *Query {
	return &Query{vals: u.Query(), used: map[string]bool{}}
}

func (q *Query) get(name string) (string, bool) {
	q.used[name] = true
	vs, ok := q.vals[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	if len(vs) > 1 {
		q.errs = append(q.errs, fmt.Sprintf("parameter %q given %d times", name, len(vs)))
	}
	return vs[0], true
}

// String returns the parameter or def.
func (q *Query) String(name, def string) string {
	if v, ok := q.get(name); ok {
		return v
	}
	return def
}

// Int returns the parameter as an int or def.
func (q *Query) Int(name string, def int) int {
	v, ok := q.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		q.errs = append(q.errs, fmt.Sprintf("parameter %q=%q is not an integer", name, v))
		return def
	}
	return n
}

// Bool returns the parameter as a bool or def.
func (q *Query) Bool(name string, def bool) bool {
	v, ok := q.get(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		q.errs = append(q.errs, fmt.Sprintf("parameter %q=%q is not a boolean", name, v))
		return def
	}
	return b
}

// Duration returns the parameter as a time.Duration ("30s", "500ms") or def.
func (q *Query) Duration(name string, def time.Duration) time.Duration {
	v, ok := q.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		q.errs = append(q.errs, fmt.Sprintf("parameter %q=%q is not a non-negative duration like 30s", name, v))
		return def
	}
	return d
}

// Errorf records a validation error for a parameter.
func (q *Query) Errorf(format string, args ...any) {
	q.errs = append(q.errs, fmt.Sprintf(format, args...))
}

// Finish returns an ErrInvalid error naming every unknown or malformed
// parameter, or nil.
func (q *Query) Finish() error {
	var unknown []string
	for k := range q.vals {
		if !q.used[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	errs := q.errs
	if len(unknown) > 0 {
		known := make([]string, 0, len(q.used))
		for k := range q.used {
			known = append(known, k)
		}
		sort.Strings(known)
		errs = append(errs, fmt.Sprintf("unknown parameter(s) %s (known: %s)", strings.Join(unknown, ", "), strings.Join(known, ", ")))
	}
	if len(errs) == 0 {
		return nil
	}
	return Invalidf("broker URL: %s", strings.Join(errs, "; "))
}
