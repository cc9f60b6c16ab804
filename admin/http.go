package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// HandlerConfig configures NewHandler.
type HandlerConfig struct {
	// Tokens are the bearer tokens the API accepts. At least one is
	// required; names and secrets must be unique.
	Tokens []Token
	// Metrics, when set, is served at /metrics to any authenticated token
	// that is not tenant-scoped (the metrics cover every tenant; a scoped
	// token gets 403), telemetry.Telemetry.Handler for example. Defaults to
	// nil: no /metrics route.
	Metrics http.Handler
	// Logger receives refused requests (Warn), internal errors (Error) and,
	// unless AuditLogger is set, the audit log. Defaults to slog.Default().
	Logger *slog.Logger
	// AuditLogger receives the audit log: one Info record "admin action"
	// per state-changing call, with the token's name, role and tenant, the
	// status and what was done. Defaults to Logger. NewHandler fails when
	// it does not take Info records, so the audit log is never dropped
	// silently by a logger set to Warn: give a logger of its own then.
	AuditLogger *slog.Logger
	// TrustedOrigins are extra origins ("https://ops.example.com") allowed
	// to make state-changing requests from a browser, for a dashboard
	// served from another origin. Defaults to none: same origin only.
	TrustedOrigins []string
	// MaxBodyBytes bounds a request body (413 above it). Defaults to 1 MiB.
	MaxBodyBytes int64
	// ReadyTimeout bounds the /readyz check. Defaults to 3 s.
	ReadyTimeout time.Duration
	// RequestTimeout bounds every API call but the bulk dead-letter
	// operations (a 504 when it runs out). Defaults to 30 s.
	RequestTimeout time.Duration
	// BulkTimeout bounds a bulk dead-letter operation (replay, move, purge
	// by IDs or filter); an item already started is finished. Defaults to
	// 15 minutes.
	BulkTimeout time.Duration
}

// Defaults of HandlerConfig.RequestTimeout and BulkTimeout.
const (
	DefaultRequestTimeout = 30 * time.Second
	DefaultBulkTimeout    = 15 * time.Minute
)

// DefaultMaxBodyBytes is HandlerConfig.MaxBodyBytes's default.
const DefaultMaxBodyBytes = 1 << 20

// NewHandler returns the admin HTTP API, the ingestion API and the web
// dashboard over ops (see docs/ADMIN-API.md for every route). Its routes are
// relative, so it can be mounted under any prefix:
//
//	mux.Handle("/admin/", http.StripPrefix("/admin", h))
//
// It fails when ops is nil, no token is given, a token is malformed or two
// tokens share a name or secret, or a trusted origin is malformed.
func NewHandler(ops *Ops, cfg HandlerConfig) (http.Handler, error) {
	if ops == nil {
		return nil, broker.Invalidf("admin: nil Ops")
	}
	if len(cfg.Tokens) == 0 {
		return nil, broker.Invalidf("admin: no tokens: the API refuses to run open")
	}
	auth, err := newAuthenticator(cfg.Tokens)
	if err != nil {
		return nil, broker.Invalidf("admin: %v", err)
	}
	h := &handler{
		ops:     ops,
		auth:    auth,
		log:     cfg.Logger,
		cop:     http.NewCrossOriginProtection(),
		mux:     http.NewServeMux(),
		maxBody: cfg.MaxBodyBytes,
		readyTO: cfg.ReadyTimeout,
		reqTO:   cfg.RequestTimeout,
		bulkTO:  cfg.BulkTimeout,
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.audit = cfg.AuditLogger
	if h.audit == nil {
		h.audit = h.log
	}
	if !h.audit.Enabled(context.Background(), slog.LevelInfo) {
		return nil, broker.Invalidf("admin: the audit logger discards Info records, so the audit log would be lost: set HandlerConfig.AuditLogger to a logger that keeps them")
	}
	if h.reqTO <= 0 {
		h.reqTO = DefaultRequestTimeout
	}
	if h.bulkTO <= 0 {
		h.bulkTO = DefaultBulkTimeout
	}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	if h.readyTO <= 0 {
		h.readyTO = 3 * time.Second
	}
	for _, o := range cfg.TrustedOrigins {
		if err := h.cop.AddTrustedOrigin(o); err != nil {
			return nil, broker.Invalidf("admin: trusted origin %q: %v", o, err)
		}
	}
	h.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross-origin request refused: state-changing calls must come from the dashboard's own origin")
	}))
	if err := h.routes(cfg.Metrics); err != nil {
		return nil, err
	}
	return h, nil
}

type handler struct {
	ops     *Ops
	auth    *authenticator
	log     *slog.Logger
	cop     *http.CrossOriginProtection
	mux     *http.ServeMux
	maxBody int64
	readyTO time.Duration
	reqTO   time.Duration
	bulkTO  time.Duration
	audit   *slog.Logger
}

// ServeHTTP sets the security headers every response carries and
// dispatches.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	if r.URL.Path == "" {
		// Mounted with http.StripPrefix("/admin", h) and asked for "/admin":
		// send the browser to "/admin/" so the page's relative links work.
		p := r.URL.RawPath
		if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
			p = u.EscapedPath()
		}
		http.Redirect(w, r, p+"/", http.StatusMovedPermanently)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// call is what a route's function gets besides the request.
type call struct {
	tok   *Token
	scope Scope
	who   Actor
	// audit collects attributes for the audit log line of a
	// state-changing call.
	audit []any
}

// note adds attributes to the audit log line.
func (c *call) note(args ...any) { c.audit = append(c.audit, args...) }

// admin reports whether the caller may see task arguments.
func (c *call) admin() bool { return c.tok != nil && c.tok.Role == RoleAdmin }

// apiFunc serves one API route: it returns the status and the value to
// encode as JSON, or an error mapped by errorStatus.
type apiFunc func(r *http.Request, c *call) (int, any, error)

// apiError is an error with the status and message the client sees.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// handle registers fn under pattern ("METHOD /path") with the access it
// requires. Every POST route is state-changing: it must pass the
// cross-origin check, carry a JSON body (or none, declared as JSON), and
// it is audit-logged.
//
// The call's context ends after HandlerConfig.RequestTimeout, or
// BulkTimeout for the routes under dead/ that take a bulk body.
func (h *handler) handle(pattern string, need access, fn apiFunc) {
	changes := strings.HasPrefix(pattern, "POST ")
	timeout := h.reqTO
	if changes && (strings.HasSuffix(pattern, "/dead/replay") || strings.HasSuffix(pattern, "/dead/move") || strings.HasSuffix(pattern, "/dead/purge")) {
		timeout = h.bulkTO
	}
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		r = r.WithContext(ctx)
		c := &call{}
		if need != accessPublic {
			tok, ok := h.authenticate(w, r, need)
			if !ok {
				return
			}
			c.tok, c.scope, c.who = tok, Scope{Tenant: tok.Tenant}, Actor("token:"+tok.Name)
			r = r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok))
		}
		w.Header().Set("Cache-Control", "no-store")
		if changes {
			if err := h.cop.Check(r); err != nil {
				h.refused(r, c.tok, http.StatusForbidden, "cross-origin")
				writeError(w, http.StatusForbidden, "cross-origin request refused: state-changing calls must come from the dashboard's own origin")
				return
			}
			if !isJSON(r.Header.Get("Content-Type")) {
				h.refused(r, c.tok, http.StatusUnsupportedMediaType, "content type")
				writeError(w, http.StatusUnsupportedMediaType, "state-changing requests must have Content-Type: application/json")
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, h.maxBody)
		}
		status, v, err := fn(r, c)
		if err != nil {
			var msg string
			status, msg = h.errorStatus(r, err)
			writeError(w, status, msg)
		} else {
			writeJSON(w, status, v)
		}
		if changes {
			attrs := []any{
				slog.String("action", r.Method+" "+r.URL.Path),
				slog.String("token", c.tok.Name),
				slog.String("role", string(c.tok.Role)),
				slog.String("tenant", c.tok.Tenant),
				slog.Int("status", status),
				slog.String("remote", r.RemoteAddr),
			}
			attrs = append(attrs, c.audit...)
			if err != nil {
				attrs = append(attrs, slog.String("error", err.Error()))
			}
			// Logged after the call's deadline too.
			h.audit.LogAttrs(context.WithoutCancel(r.Context()), slog.LevelInfo, "admin action", toAttrs(attrs)...)
		}
	})
}

func toAttrs(args []any) []slog.Attr {
	r := slog.Record{}
	r.Add(args...)
	out := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool { out = append(out, a); return true })
	return out
}

// authenticate checks the bearer token and the role; it answers 401 or
// 403 itself and returns ok=false then.
func (h *handler) authenticate(w http.ResponseWriter, r *http.Request, need access) (*Token, bool) {
	secret, ok := bearer(r)
	if !ok {
		h.refused(r, nil, http.StatusUnauthorized, "no bearer token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard"`)
		writeError(w, http.StatusUnauthorized, "authentication required: send Authorization: Bearer <token>")
		return nil, false
	}
	tok := h.auth.lookup(secret)
	if tok == nil {
		h.refused(r, nil, http.StatusUnauthorized, "unknown token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "unknown token")
		return nil, false
	}
	if !need.allows(tok.Role) {
		h.refused(r, tok, http.StatusForbidden, "role")
		writeError(w, http.StatusForbidden, fmt.Sprintf("token %q has the %s role; this needs %s", tok.Name, tok.Role, need))
		return nil, false
	}
	return tok, true
}

// refused logs a refused request (never the secret).
func (h *handler) refused(r *http.Request, tok *Token, status int, why string) {
	name := ""
	if tok != nil {
		name = tok.Name
	}
	h.log.LogAttrs(r.Context(), slog.LevelWarn, "admin request refused",
		slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.Int("status", status), slog.String("why", why),
		slog.String("token", name), slog.String("remote", r.RemoteAddr))
}

// errorStatus maps an operation's error to a status and a message that
// leaks no internals: unexpected errors are logged with a reference and
// the client gets only the reference.
func (h *handler) errorStatus(r *http.Request, err error) (int, string) {
	var ae *apiError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.msg
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", mbe.Limit)
	case errors.Is(err, ErrTenantScoped):
		return http.StatusForbidden, err.Error()
	case errors.Is(err, ledger.ErrNotFound):
		return http.StatusNotFound, "not found"
	case errors.Is(err, switchyard.ErrNoLedger):
		return http.StatusNotImplemented, "this needs a ledger: run the admin API with one (--ledger DSN)"
	case errors.Is(err, switchyard.ErrNotAwaitingReview), errors.Is(err, ledger.ErrConflict):
		return http.StatusConflict, err.Error()
	case errors.Is(err, ErrKeyReused):
		return http.StatusUnprocessableEntity, err.Error()
	case errors.Is(err, broker.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, err.Error()
	case errors.Is(err, broker.ErrInvalid):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, broker.ErrUnsupported):
		return http.StatusNotImplemented, "the broker does not support this operation"
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timed out"
	case errors.Is(err, broker.ErrTransient):
		ref := h.internal(r, err)
		return http.StatusServiceUnavailable, "the broker or the ledger is unavailable; try again (ref " + ref + ")"
	}
	ref := h.internal(r, err)
	return http.StatusInternalServerError, "internal error (ref " + ref + ")"
}

func (h *handler) internal(r *http.Request, err error) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	ref := hex.EncodeToString(b[:])
	h.log.LogAttrs(r.Context(), slog.LevelError, "admin request failed",
		slog.String("ref", ref), slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("error", err.Error()))
	return ref
}

func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, map[string]string{"error": msg})
}

// decodeBody decodes a JSON object into v, refusing unknown fields and
// trailing data. An empty body leaves v alone when optional, else is an
// error.
func decodeBody(r *http.Request, v any, optional bool) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return badRequest("reading the request body: %v", err)
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		if optional {
			return nil
		}
		return badRequest("the request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		var pe *time.ParseError
		switch {
		case errors.As(err, &se):
			return badRequest("the request body is not valid JSON (at byte %d): %v", se.Offset, err)
		case errors.As(err, &te):
			if te.Field != "" {
				return badRequest("field %q: want %s, got JSON %s", strings.TrimPrefix(te.Field, "EnqueueRequest."), te.Type, te.Value)
			}
			return badRequest("the request body must be a JSON object")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("the request body is truncated JSON")
		case errors.As(err, &pe):
			return badRequest("a time in the request body is not RFC 3339 (2026-11-29T14:00:00Z): %q", pe.Value)
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return badRequest("unknown field %s in the request body", f)
		}
		return badRequest("the request body: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return badRequest("the request body has data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("the request body has data after the JSON object")
	}
	return nil
}
