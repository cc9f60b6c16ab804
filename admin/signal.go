package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/switchyard-dev/switchyard"
)

// Signal delivers payload to a task's durable wait (switchyard.AwaitEvent)
// and resumes the task; a task out of sc reads as not found. With a token
// the wait is found by it and the scope is not consulted (the token is the
// credential: whoever holds it may signal that one wait, once).
func (o *Ops) Signal(ctx context.Context, sc Scope, t switchyard.SignalTarget, payload []byte) (*switchyard.SignalResult, error) {
	if o.cfg.Ledger == nil {
		return nil, ErrNoLedger
	}
	if t.Token == "" {
		if t.TaskID != "" {
			if _, err := o.scopedTask(ctx, sc, t.TaskID); err != nil {
				return nil, err
			}
		} else if sc.Tenant != "" {
			if t.Tenant != "" && t.Tenant != sc.Tenant {
				return nil, switchyard.ErrNoSuchWait
			}
			t.Tenant = sc.Tenant
		}
	}
	return o.client.Signal(ctx, t, payload)
}

// signalTask serves POST tasks/{id}/signals/{name} (admin role, tenant
// scope, audited): the body is the event's JSON payload.
func (h *handler) signalTask(r *http.Request, c *call) (int, any, error) {
	id, name := r.PathValue("id"), r.PathValue("name")
	c.note(slog.String("id", id), slog.String("event", name))
	payload, err := readPayload(r)
	if err != nil {
		return 0, nil, err
	}
	res, err := h.ops.Signal(r.Context(), c.scope, switchyard.SignalTarget{TaskID: id, Name: name}, payload)
	if err != nil {
		return 0, nil, err
	}
	c.note(slog.Bool("resumed", res.Resumed))
	return http.StatusOK, map[string]any{"id": res.TaskID, "event": res.Name, "resumed": res.Resumed}, nil
}

func readPayload(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil, nil
	}
	if !json.Valid(b) {
		return nil, badRequest("the body must be the event's payload as JSON")
	}
	return b, nil
}

// signalCallback serves POST signals/{token}: the HTTP callback of a
// durable wait, authorised by the wait's one-time token alone (no bearer
// token: the caller is another system). The CSRF rules of every
// state-changing call apply, and the call is audited — with the token's
// hash prefix, never the token.
func (h *handler) signalCallback(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.reqTO)
	defer cancel()
	tok := r.PathValue("token")
	sum := sha256.Sum256([]byte(tok))
	ref := hex.EncodeToString(sum[:6])
	// Logs and error references name the hash, not the path's token.
	rl := r.Clone(ctx)
	rl.URL.Path = strings.TrimSuffix(r.URL.Path, tok) + "sha256:" + ref
	w.Header().Set("Cache-Control", "no-store")
	status, msg := http.StatusOK, ""
	var res *switchyard.SignalResult
	switch {
	case h.cop.Check(r) != nil:
		h.refused(rl, nil, http.StatusForbidden, "cross-origin")
		status, msg = http.StatusForbidden, "cross-origin request refused: state-changing calls must come from the dashboard's own origin"
	case !isJSON(r.Header.Get("Content-Type")):
		h.refused(rl, nil, http.StatusUnsupportedMediaType, "content type")
		status, msg = http.StatusUnsupportedMediaType, "state-changing requests must have Content-Type: application/json"
	default:
		r.Body = http.MaxBytesReader(w, r.Body, h.maxBody)
		payload, err := readPayload(r)
		if err == nil {
			if tok == "" {
				err = badRequest("no token")
			} else {
				res, err = h.ops.Signal(ctx, Scope{}, switchyard.SignalTarget{Token: tok}, payload)
			}
		}
		if err != nil {
			status, msg = h.errorStatus(rl, err)
			if status == http.StatusNotFound {
				msg = "no wait has this token"
			}
		}
	}
	if msg != "" {
		writeError(w, status, msg)
	} else {
		writeJSON(w, status, map[string]any{"done": "signal", "resumed": res.Resumed})
	}
	attrs := []slog.Attr{slog.String("action", "POST signal callback"), slog.String("token_sha256", ref),
		slog.Int("status", status), slog.String("remote", r.RemoteAddr)}
	if res != nil {
		attrs = append(attrs, slog.String("id", res.TaskID), slog.String("event", res.Name), slog.Bool("resumed", res.Resumed))
	}
	if msg != "" {
		attrs = append(attrs, slog.String("error", msg))
	}
	h.audit.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "admin action", attrs...)
}
