package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Watch yields task id's stream (state changes, progress, chunks) after
// offset from, as switchyard.Client.Watch does, once the task is found in
// scope (else ledger.ErrNotFound).
func (o *Ops) Watch(ctx context.Context, sc Scope, id string, from int64, opts *switchyard.WatchOpts) iter.Seq2[switchyard.WatchEvent, error] {
	return func(yield func(switchyard.WatchEvent, error) bool) {
		if o.cfg.Ledger == nil {
			yield(switchyard.WatchEvent{}, ErrNoLedger)
			return
		}
		if _, err := o.scopedTask(ctx, sc, id); err != nil {
			yield(switchyard.WatchEvent{}, err)
			return
		}
		for ev, err := range o.client.Watch(ctx, id, from, opts) {
			if !yield(ev, err) {
				return
			}
		}
	}
}

// LatestProgress returns the newest progress report of each of ids in
// scope that has one.
func (o *Ops) LatestProgress(ctx context.Context, sc Scope, ids []string) (map[string]switchyard.WatchEvent, error) {
	if o.cfg.Ledger == nil {
		return nil, ErrNoLedger
	}
	m, err := o.client.LatestProgress(ctx, ids)
	if err != nil || sc.Tenant == "" {
		return m, err
	}
	for id := range m {
		if _, err := o.scopedTask(ctx, sc, id); err != nil {
			delete(m, id)
		}
	}
	return m, nil
}

// Server-Sent Events of a task.
const (
	// sseMaxDuration is how long one events response lasts; the client
	// reconnects with Last-Event-ID and loses nothing.
	sseMaxDuration = 30 * time.Minute
	// sseKeepAlive is how often an idle stream sends a comment line, so
	// proxies keep the connection.
	sseKeepAlive = 15 * time.Second
)

// streamEventJSON is the data of one event.
type streamEventJSON struct {
	Offset  int64     `json:"offset"`
	Kind    string    `json:"kind"`
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt,omitempty"`
	// state
	From   string `json:"from,omitempty"`
	State  string `json:"state,omitempty"`
	Reason string `json:"reason,omitempty"`
	// progress
	Fraction *float64 `json:"fraction,omitempty"`
	Message  string   `json:"message,omitempty"`
	// chunk: Text when the bytes are UTF-8, else Base64; both left out
	// for a caller without the right to see task payloads (Bytes says
	// how many there are).
	Text   *string `json:"text,omitempty"`
	Base64 []byte  `json:"base64,omitempty"`
	Bytes  *int    `json:"bytes,omitempty"`
}

func streamEventOut(ev switchyard.WatchEvent, payloads bool) streamEventJSON {
	out := streamEventJSON{Offset: ev.Offset, Kind: string(ev.Kind), At: ev.At.UTC(), Attempt: ev.Attempt}
	switch ev.Kind {
	case ledger.StreamState:
		out.From, out.State, out.Reason = string(ev.From), string(ev.State), ev.Reason
	case ledger.StreamProgress:
		f := ev.Fraction
		out.Fraction, out.Message = &f, ev.Message
	case ledger.StreamChunk:
		n := len(ev.Data)
		out.Bytes = &n
		if payloads {
			if utf8.Valid(ev.Data) {
				s := string(ev.Data)
				out.Text = &s
			} else {
				out.Base64 = ev.Data
			}
		}
	}
	return out
}

// events serves GET tasks/{id}/events: the task's stream as Server-Sent
// Events, resumable with Last-Event-ID (or ?from=offset). It needs the
// read, enqueue or admin role, like the status route; chunk contents go to
// the enqueue and admin roles (a read-only token sees their sizes).
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	tok, ok := h.authenticate(w, r, accessStatus)
	if !ok {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	sc := Scope{Tenant: tok.Tenant}
	id := r.PathValue("id")
	var from int64
	last := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	if q := r.URL.Query().Get("from"); q != "" {
		if last != "" && last != q {
			writeError(w, http.StatusBadRequest, "give Last-Event-ID or from, not two different offsets")
			return
		}
		last = q
	}
	if last != "" {
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("the offset must be a non-negative integer (the id of the last event received), got %q", last))
			return
		}
		from = n
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "this server cannot stream responses")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), sseMaxDuration)
	defer cancel()
	// The scope check and the first read answer with a status code (404
	// for an unknown or out-of-scope task) before the stream starts.
	check, ccancel := context.WithTimeout(ctx, h.reqTO)
	_, err := h.ops.scopedTask(check, sc, id)
	ccancel()
	if err != nil {
		status, msg := h.errorStatus(r, err)
		writeError(w, status, msg)
		return
	}
	payloads := tok.Role == RoleAdmin || tok.Role == RoleEnqueue
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 1000\n\n")
	fl.Flush()

	evs := make(chan streamItem)
	go func() {
		defer close(evs)
		// Watch's defaults: woken by the ledger's notes, polling at 1s
		// only as a safety net (at 100ms on a ledger without notes).
		for ev, err := range h.ops.Watch(ctx, sc, id, from, nil) {
			select {
			case evs <- streamItem{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	keep := time.NewTicker(sseKeepAlive)
	defer keep.Stop()
	for {
		select {
		case it, open := <-evs:
			if !open {
				fmt.Fprint(w, "event: end\ndata: {}\n\n")
				fl.Flush()
				return
			}
			if it.err != nil {
				if !errors.Is(it.err, context.Canceled) && !errors.Is(it.err, context.DeadlineExceeded) {
					_, msg := h.errorStatus(r, it.err)
					b, _ := json.Marshal(map[string]string{"error": msg})
					fmt.Fprintf(w, "event: error\ndata: %s\n\n", b)
					fl.Flush()
				}
				return
			}
			b, err := json.Marshal(streamEventOut(it.ev, payloads))
			if err != nil {
				return
			}
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", it.ev.Offset, it.ev.Kind, b)
			fl.Flush()
		case <-keep.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		case <-ctx.Done():
			return
		}
	}
}

type streamItem struct {
	ev  switchyard.WatchEvent
	err error
}

// progressJSON is a running task's latest progress report in listings.
type progressJSON struct {
	Fraction float64   `json:"fraction"`
	Message  string    `json:"message,omitempty"`
	At       time.Time `json:"at"`
}

type taskProgressJSON struct {
	taskJSON
	Progress *progressJSON `json:"progress,omitempty"`
}

// withProgress adds the latest progress report to the running tasks of a
// listing. A failure to read it leaves it out (the listing stands).
func (h *handler) withProgress(ctx context.Context, sc Scope, ts []taskJSON) []taskProgressJSON {
	out := make([]taskProgressJSON, len(ts))
	var running []string
	for i, t := range ts {
		out[i].taskJSON = t
		if t.State == ledger.Running {
			running = append(running, t.ID)
		}
	}
	if len(running) == 0 {
		return out
	}
	ps, err := h.ops.LatestProgress(ctx, sc, running)
	if err != nil {
		h.log.Warn("admin: reading progress failed", "error", err)
		return out
	}
	for i := range out {
		if p, ok := ps[out[i].ID]; ok && out[i].State == ledger.Running {
			out[i].Progress = &progressJSON{Fraction: p.Fraction, Message: p.Message, At: p.At.UTC()}
		}
	}
	return out
}
