package admin

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// routes registers every route. The patterns are relative to where the
// handler is mounted.
func (h *handler) routes(metrics http.Handler) error {
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	h.mux.HandleFunc("GET /readyz", h.readyz)
	if err := h.dashboard(); err != nil {
		return err
	}
	if metrics != nil {
		h.mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
			tok, ok := h.authenticate(w, r, accessAny)
			if !ok {
				return
			}
			if tok.Tenant != "" {
				// The metrics name every tenant's kinds and counts.
				h.refused(r, tok, http.StatusForbidden, "tenant-scoped token")
				w.Header().Set("Cache-Control", "no-store")
				writeError(w, http.StatusForbidden, "a tenant-scoped token cannot read /metrics: they cover every tenant")
				return
			}
			metrics.ServeHTTP(w, r)
		})
	}

	const v1 = "/api/v1/"
	h.handle("GET "+v1+"whoami", accessAny, h.whoami)
	h.handle("GET "+v1+"lanes", accessRead, h.lanes)
	h.handle("GET "+v1+"servers", accessRead, h.servers)       // http_servers.go
	h.handle("GET "+v1+"scaling", accessRead, h.scalingSignal) // scaling.go
	h.handle("GET "+v1+"history", accessRead, h.history)       // http_history.go
	h.handle("GET "+v1+"spend", accessRead, h.spendReport)     // spend.go
	h.handle("POST "+v1+"lanes/{lane}/pause", accessAdmin, h.pauseResume(true))
	h.handle("POST "+v1+"lanes/{lane}/resume", accessAdmin, h.pauseResume(false))
	h.handle("GET "+v1+"lanes/{lane}/events", accessRead, h.laneEvents)
	h.handle("GET "+v1+"lane-events", accessRead, h.laneEvents)
	h.handle("GET "+v1+"tasks", accessRead, h.tasks)
	h.handle("POST "+v1+"tasks", accessEnqueue, h.enqueue)
	h.handle("POST "+v1+"tasks:batch", accessEnqueue, h.enqueueBatch)
	h.handle("GET "+v1+"tasks/{id}", accessRead, h.task)
	h.handle("GET "+v1+"tasks/{id}/status", accessStatus, h.status)
	h.mux.HandleFunc("GET "+v1+"tasks/{id}/events", h.events) // Server-Sent Events (events.go)
	h.handle("POST "+v1+"tasks/{id}/signals/{name}", accessAdmin, h.signalTask)
	h.mux.HandleFunc("POST "+v1+"signals/{token}", h.signalCallback) // the one-time token is the credential (signal.go)
	h.cancelRoutes(v1)                                               // http_cancel.go
	h.handle("GET "+v1+"dead", accessRead, h.deadList)
	h.handle("GET "+v1+"dead/{lane}/{id}", accessRead, h.deadOne)
	h.handle("POST "+v1+"dead/replay", accessAdmin, h.bulk("replay"))
	h.handle("POST "+v1+"dead/move", accessAdmin, h.bulk("move"))
	h.handle("POST "+v1+"dead/purge", accessAdmin, h.bulk("purge"))
	h.handle("POST "+v1+"dead/{lane}/{id}/sandbox", accessAdmin, h.sandbox)
	h.handle("GET "+v1+"reviews", accessRead, h.reviews)
	h.handle("POST "+v1+"reviews/{id}/claim", accessAdmin, h.review("claim"))
	h.handle("POST "+v1+"reviews/{id}/approve", accessAdmin, h.review("approve"))
	h.handle("POST "+v1+"reviews/{id}/reject", accessAdmin, h.review("reject"))
	// Anything else under /api/: a JSON 404 (after authentication, so an
	// anonymous caller learns nothing about the routes).
	h.handle("/api/", accessAny, func(r *http.Request, c *call) (int, any, error) {
		return 0, nil, &apiError{http.StatusNotFound, "no such API route: " + r.Method + " " + r.URL.Path}
	})
	return nil
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	ctx, cancel := context.WithTimeout(r.Context(), h.readyTO)
	defer cancel()
	if err := h.ops.Ready(ctx); err != nil {
		// The detail (hosts, users, databases) goes to the log only: this
		// route answers anyone.
		h.log.LogAttrs(r.Context(), slog.LevelWarn, "admin: not ready", slog.String("error", err.Error()))
		what := "the broker or the ledger does not answer"
		switch {
		case strings.HasPrefix(err.Error(), "admin: broker"):
			what = "the broker does not answer"
		case strings.HasPrefix(err.Error(), "admin: ledger"):
			what = "the ledger does not answer"
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "error": "not ready: " + what + " (details in the server's log)"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (h *handler) whoami(r *http.Request, c *call) (int, any, error) {
	return http.StatusOK, map[string]string{"name": c.tok.Name, "role": string(c.tok.Role), "tenant": c.tok.Tenant}, nil
}

func (h *handler) lanes(r *http.Request, c *call) (int, any, error) {
	ls, err := h.ops.Lanes(r.Context())
	if err != nil {
		return 0, nil, err
	}
	out := make([]laneJSON, 0, len(ls))
	for _, l := range ls {
		if c.scope.Tenant != "" {
			l.PausedBy = "" // another token's name
		}
		out = append(out, laneOut(l))
	}
	return http.StatusOK, map[string]any{"lanes": out, "at": time.Now().UTC()}, nil
}

func (h *handler) pauseResume(pause bool) apiFunc {
	return func(r *http.Request, c *call) (int, any, error) {
		lane := r.PathValue("lane")
		c.note(slog.String("lane", lane))
		if c.tok.Tenant != "" {
			return 0, nil, &apiError{http.StatusForbidden, "a tenant-scoped token cannot pause or resume a lane: every tenant shares it"}
		}
		if err := decodeBody(r, &struct{}{}, true); err != nil {
			return 0, nil, err
		}
		var err error
		if pause {
			err = h.ops.PauseLane(r.Context(), lane, c.who)
		} else {
			err = h.ops.ResumeLane(r.Context(), lane, c.who)
		}
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, map[string]any{"lane": lane, "paused": pause}, nil
	}
}

// laneEvents serves the lanes' history: one lane's (lanes/{lane}/events)
// or every lane's (lane-events).
func (h *handler) laneEvents(r *http.Request, c *call) (int, any, error) {
	limit, err := limitParam(r.URL.Query())
	if err != nil {
		return 0, nil, err
	}
	lane := r.PathValue("lane") // "" on lane-events: every lane
	es, err := h.ops.LaneEvents(r.Context(), c.scope, lane, limit)
	if err != nil {
		return 0, nil, err
	}
	out := make([]laneEventJSON, 0, len(es))
	for _, e := range es {
		out = append(out, laneEventOut(e))
	}
	return http.StatusOK, map[string]any{"events": out}, nil
}

// limitParam reads the limit query parameter (0 when absent).
func limitParam(q url.Values) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, badRequest("limit must be a non-negative integer, got %q", s)
	}
	return n, nil
}

func (h *handler) tasks(r *http.Request, c *call) (int, any, error) {
	q := r.URL.Query()
	limit, err := limitParam(q)
	if err != nil {
		return 0, nil, err
	}
	f := TaskFilter{Kind: q.Get("kind"), Lane: q.Get("lane"), Tenant: q.Get("tenant"), Limit: limit, After: q.Get("after")}
	for _, v := range q["state"] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			st := ledger.State(s)
			if !st.Valid() {
				return 0, nil, badRequest("unknown state %q (queued, running, retry_wait, completed, failed, dead, awaiting_review, awaiting_event, rejected, cancelled)", s)
			}
			f.States = append(f.States, st)
		}
	}
	page, err := h.ops.Tasks(r.Context(), c.scope, f)
	if err != nil {
		return 0, nil, err
	}
	out := make([]taskJSON, 0, len(page.Tasks))
	for _, t := range page.Tasks {
		out = append(out, taskOut(t, c.admin()))
	}
	return http.StatusOK, map[string]any{"tasks": h.withProgress(r.Context(), c.scope, out), "next": page.Next}, nil
}

func (h *handler) task(r *http.Request, c *call) (int, any, error) {
	info, err := h.ops.Task(r.Context(), c.scope, r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, taskDetailOut(info, c.admin()), nil
}

func (h *handler) status(r *http.Request, c *call) (int, any, error) {
	info, err := h.ops.Task(r.Context(), c.scope, r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, statusOut(info), nil
}

// enqueue is the ingestion endpoint: validate, enqueue once per
// Idempotency-Key, answer 202 with the task's ID at once.
func (h *handler) enqueue(r *http.Request, c *call) (int, any, error) {
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if key == "" {
		return 0, nil, badRequest("the Idempotency-Key header is required: the same key always gives the same task")
	}
	var body ingestJSON
	if err := decodeBody(r, &body, false); err != nil {
		return 0, nil, err
	}
	req := body.EnqueueRequest
	if body.DelayMS != nil {
		if req.Delay != "" {
			return 0, nil, badRequest("give delay or delay_ms, not both")
		}
		if *body.DelayMS < 0 {
			return 0, nil, badRequest("delay_ms must not be negative")
		}
		if *body.DelayMS > int64(math.MaxInt64/time.Millisecond) {
			return 0, nil, badRequest("delay_ms is too large: it runs past the supported range (until %d-12-31 UTC)", broker.MaxYear)
		}
		req.Delay = (time.Duration(*body.DelayMS) * time.Millisecond).String()
	}
	if req.Kind == "" {
		return 0, nil, badRequest("kind is required")
	}
	req.IdempotencyKey = key
	req.Actor = c.who
	c.note(slog.String("kind", req.Kind), slog.String("lane", req.Lane), slog.String("task_tenant", req.Tenant))
	res, err := h.ops.Enqueue(r.Context(), c.scope, req)
	if err != nil && res == nil {
		return 0, nil, err
	}
	if err != nil {
		// Enqueued; only its "submitted" event is missing.
		h.internal(r, err)
		c.note(slog.String("event_error", err.Error()))
	}
	c.note(slog.String("id", res.ID), slog.Bool("duplicate", res.Duplicate))
	out := enqueuedJSON{ID: res.ID, Duplicate: res.Duplicate, StatusURL: statusURL(r, res.ID)}
	if info, err := h.ops.Task(r.Context(), c.scope, res.ID); err == nil {
		out.State = info.Task.State
	} else if !res.Duplicate {
		out.State = ledger.Queued
	}
	return http.StatusAccepted, out, nil
}

// statusURL is the absolute path of a task's status endpoint, computed from
// the request as the client sent it (so it holds under any mount prefix).
func statusURL(r *http.Request, id string) string {
	p := r.URL.Path
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil && u.Path != "" {
		p = u.Path
	}
	return strings.TrimSuffix(p, "/") + "/" + url.PathEscape(id) + "/status"
}

func (h *handler) deadList(r *http.Request, c *call) (int, any, error) {
	q := r.URL.Query()
	limit, err := limitParam(q)
	if err != nil {
		return 0, nil, err
	}
	l, err := h.ops.DeadList(r.Context(), c.scope, DeadFilter{
		Lane: q.Get("lane"), Kind: q.Get("kind"), Tenant: q.Get("tenant"), Reason: broker.Reason(q.Get("reason")), Limit: limit,
	})
	if err != nil {
		return 0, nil, err
	}
	out := make([]deadJSON, 0, len(l.Items))
	for _, d := range l.Items {
		out = append(out, deadOut(d, c.admin()))
	}
	return http.StatusOK, map[string]any{"dead_letters": out, "read": l.Mode, "more": l.More, "truncated": l.Truncated}, nil
}

func (h *handler) deadOne(r *http.Request, c *call) (int, any, error) {
	d, err := h.ops.DeadLetter(r.Context(), c.scope, r.PathValue("lane"), r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, deadOut(*d, c.admin()), nil
}

// bulk serves replay, move and purge by IDs or by filter.
func (h *handler) bulk(op string) apiFunc {
	return func(r *http.Request, c *call) (int, any, error) {
		var b bulkJSON
		if err := decodeBody(r, &b, false); err != nil {
			return 0, nil, err
		}
		for _, id := range b.IDs {
			if strings.TrimSpace(id) == "" {
				return 0, nil, badRequest("ids must not contain empty strings")
			}
		}
		if b.IDs == nil && b.Filter == nil {
			return 0, nil, badRequest("give ids ([...]) or a filter ({lane, kind, tenant, reason}; {} selects every dead letter)")
		}
		if b.IDs != nil && len(b.IDs) == 0 && b.Filter == nil {
			return 0, nil, badRequest("ids is empty")
		}
		if op == "purge" && len(b.IDs) == 0 && b.Filter.empty() {
			return 0, nil, badRequest("refusing to purge every dead letter: give ids or a non-empty filter")
		}
		if op == "move" && b.ToLane == "" {
			return 0, nil, badRequest("to_lane is required for move")
		}
		if op != "move" && b.ToLane != "" {
			return 0, nil, badRequest("to_lane is only for move")
		}
		if b.Max < 0 {
			return 0, nil, badRequest("max must not be negative")
		}
		f := DeadFilter{IDs: b.IDs, Max: b.Max}
		if b.Filter != nil {
			f.Lane, f.Kind, f.Tenant, f.Reason = b.Filter.Lane, b.Filter.Kind, b.Filter.Tenant, broker.Reason(b.Filter.Reason)
		}
		c.note(slog.String("op", op), slog.Int("ids", len(b.IDs)), slog.String("filter_lane", f.Lane),
			slog.String("filter_kind", f.Kind), slog.String("filter_tenant", f.Tenant), slog.String("filter_reason", string(f.Reason)))
		var rep *Report
		var err error
		switch op {
		case "replay":
			rep, err = h.ops.Replay(r.Context(), c.scope, f, c.who, nil)
		case "move":
			c.note(slog.String("to_lane", b.ToLane))
			rep, err = h.ops.Move(r.Context(), c.scope, f, b.ToLane, c.who, nil)
		case "purge":
			rep, err = h.ops.Purge(r.Context(), c.scope, f, c.who, nil)
		}
		if err != nil {
			return 0, nil, err
		}
		c.note(slog.Int("done", rep.Done), slog.Int("failed", len(rep.Failed)))
		return http.StatusOK, reportOut(rep), nil
	}
}

func (h *handler) sandbox(r *http.Request, c *call) (int, any, error) {
	lane, id := r.PathValue("lane"), r.PathValue("id")
	c.note(slog.String("lane", lane), slog.String("id", id))
	if err := decodeBody(r, &struct{}{}, true); err != nil {
		return 0, nil, err
	}
	sid, err := h.ops.ReplaySandbox(r.Context(), c.scope, lane, id, c.who)
	if err != nil {
		return 0, nil, err
	}
	c.note(slog.String("sandbox_id", sid))
	p := r.URL.Path
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil && u.Path != "" {
		p = u.Path
	}
	base, _, _ := strings.Cut(p, "/dead/")
	return http.StatusAccepted, map[string]string{"id": sid, "status_url": base + "/tasks/" + url.PathEscape(sid) + "/status"}, nil
}

func (h *handler) reviews(r *http.Request, c *call) (int, any, error) {
	limit, err := limitParam(r.URL.Query())
	if err != nil {
		return 0, nil, err
	}
	items, err := h.ops.Reviews(r.Context(), c.scope, limit)
	if err != nil {
		return 0, nil, err
	}
	out := make([]reviewJSON, 0, len(items))
	for _, it := range items {
		out = append(out, reviewOut(it, c.admin()))
	}
	return http.StatusOK, map[string]any{"reviews": out}, nil
}

func (h *handler) review(op string) apiFunc {
	return func(r *http.Request, c *call) (int, any, error) {
		id := r.PathValue("id")
		c.note(slog.String("op", op), slog.String("id", id))
		var body struct {
			Note   string `json:"note"`
			Reason string `json:"reason"`
		}
		if err := decodeBody(r, &body, true); err != nil {
			return 0, nil, err
		}
		var err error
		switch op {
		case "claim":
			if body.Note != "" || body.Reason != "" {
				return 0, nil, badRequest("claim takes no note or reason")
			}
			err = h.ops.Claim(r.Context(), c.scope, id, c.who)
		case "approve":
			if body.Reason != "" {
				return 0, nil, badRequest("approve takes a note, not a reason")
			}
			err = h.ops.Approve(r.Context(), c.scope, id, c.who, body.Note)
		case "reject":
			if strings.TrimSpace(body.Reason) == "" {
				return 0, nil, badRequest("reject needs a reason")
			}
			if body.Note != "" {
				return 0, nil, badRequest("reject takes a reason, not a note")
			}
			err = h.ops.Reject(r.Context(), c.scope, id, c.who, body.Reason)
		}
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, map[string]string{"id": id, "done": op}, nil
	}
}
