package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// TaskHeader is the header the adapters send on direct calls, naming the
// task: the fake counts direct calls by it.
const TaskHeader = "X-Switchyard-Task"

// messageParams is the part of an Anthropic message request the fake reads.
type messageParams struct {
	Model     string          `json:"model"`
	MaxTokens int64           `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

func (p messageParams) split() (prefix, rest string) {
	if len(p.System) > 0 {
		prefix = contentText(p.System)
	}
	for i, m := range p.Messages {
		if i == 0 && prefix == "" {
			prefix = contentText(m.Content)
		} else {
			rest += contentText(m.Content)
		}
	}
	return prefix, rest
}

func (s *Server) message(mode string, p messageParams) map[string]any {
	prefix, rest := p.split()
	u := s.usage(mode, p.Model, prefix, rest, p.MaxTokens)
	return map[string]any{"id": s.id("msg"), "type": "message", "role": "assistant", "model": p.Model,
		"content":     []any{map[string]any{"type": "text", "text": "echo: " + rest}},
		"stop_reason": "end_turn", "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": u.Input, "output_tokens": u.Output, "cache_read_input_tokens": u.CachedInput,
			"cache_creation_input_tokens": 0}}
}

func (s *Server) anDirect(w http.ResponseWriter, r *http.Request) {
	var p messageParams
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Model == "" || p.MaxTokens <= 0 {
		writeJSON(w, 400, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": "bad message request"}})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.direct[r.Header.Get(TaskHeader)]++
	writeJSON(w, 200, s.message("direct", p))
}

type anRequest struct {
	CustomID string        `json:"custom_id"`
	Params   messageParams `json:"params"`
}

type anBatch struct {
	obj     map[string]any
	reqs    []anRequest
	polls   int
	results []byte
}

func (s *Server) anCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Requests []anRequest `json:"requests"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Requests) == 0 {
		writeJSON(w, 400, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": "bad batch"}})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults.Submit429 > 0 {
		s.faults.Submit429--
		ra := max(1, s.faults.RetryAfter)
		w.Header().Set("Retry-After", fmt.Sprint(ra))
		writeJSON(w, 429, map[string]any{"type": "error", "error": map[string]any{"type": "rate_limit_error", "message": "too many batches"}})
		return
	}
	for _, q := range req.Requests {
		s.submitted[q.CustomID]++
	}
	s.batches++
	id := s.id("msgbatch")
	now := time.Now().UTC()
	b := &anBatch{reqs: req.Requests, obj: map[string]any{"id": id, "type": "message_batch", "processing_status": "in_progress",
		"request_counts": map[string]any{"processing": len(req.Requests), "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
		"ended_at":       nil, "created_at": now.Format(time.RFC3339), "expires_at": now.Add(24 * time.Hour).Format(time.RFC3339),
		"archived_at": nil, "cancel_initiated_at": nil, "results_url": nil}}
	s.an[id] = b
	writeJSON(w, 200, b.obj)
}

func (s *Server) anGet(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.an[r.PathValue("id")]
	if !ok {
		writeJSON(w, 404, map[string]any{"type": "error", "error": map[string]any{"type": "not_found_error", "message": "no such batch"}})
		return
	}
	b.polls++
	if b.obj["processing_status"] == "in_progress" && b.polls >= s.PollsToEnd {
		s.anEnd(b, "http://"+r.Host)
	}
	writeJSON(w, 200, b.obj)
}

func (s *Server) anResults(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	b, ok := s.an[r.PathValue("id")]
	s.mu.Unlock()
	if !ok || b.results == nil {
		writeJSON(w, 404, map[string]any{"type": "error", "error": map[string]any{"type": "not_found_error", "message": "no results"}})
		return
	}
	w.Header().Set("Content-Type", "application/x-jsonl")
	_, _ = w.Write(b.results)
}

// anEnd finishes b (under s.mu) per the faults.
func (s *Server) anEnd(b *anBatch, base string) {
	expire := s.faults.Expire > 0
	if expire {
		s.faults.Expire--
	}
	var out strings.Builder
	counts := map[string]int{"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
	for i, q := range b.reqs {
		id := q.CustomID
		switch {
		case expire && i >= len(b.reqs)/2:
			fmt.Fprintf(&out, `{"custom_id":%q,"result":{"type":"expired"}}`+"\n", id)
			counts["expired"]++
		case s.faults.Drop[id]:
			delete(s.faults.Drop, id)
		case s.faults.Malformed[id]:
			delete(s.faults.Malformed, id)
			fmt.Fprintf(&out, `{"custom_id":%q,"result":{"type":"succeeded","message":{"usage":{"input_tokens":"many"}}}}`+"\n", id)
			counts["succeeded"]++
		case s.faults.Fail[id] != "":
			typ := "api_error"
			if s.faults.Fail[id] == "invalid" {
				typ = "invalid_request_error"
			}
			delete(s.faults.Fail, id)
			fmt.Fprintf(&out, `{"custom_id":%q,"result":{"type":"errored","error":{"type":"error","error":{"type":%q,"message":"injected"}}}}`+"\n", id, typ)
			counts["errored"]++
		default:
			msg, _ := json.Marshal(s.message("batch", q.Params))
			fmt.Fprintf(&out, `{"custom_id":%q,"result":{"type":"succeeded","message":%s}}`+"\n", id, msg)
			counts["succeeded"]++
		}
	}
	if s.faults.Garbage {
		out.WriteString("{{{ not json\n")
	}
	b.results = []byte(out.String())
	b.obj["processing_status"] = "ended"
	b.obj["ended_at"] = time.Now().UTC().Format(time.RFC3339)
	b.obj["request_counts"] = counts
	b.obj["results_url"] = base + "/v1/messages/batches/" + b.obj["id"].(string) + "/results"
}
