// Package fakeprovider is an in-process stand-in for the OpenAI Batch API
// and Anthropic's Message Batches API, for tests and benchmarks on
// loopback: the endpoints' real request and response shapes (file upload,
// batch create, get and list, results download, direct calls), with
// injectable partial failures, missing and malformed result lines,
// expiry, and a 429 on submit. It is a test double: it answers with
// deterministic text and usage, never calls out, and models a prompt
// cache so that cached-token shares can be measured.
//
// Usage of a request: input tokens are ceil(len(prompt text)/4); output
// tokens are min(max_tokens, 16) (16 when max_tokens is absent). The
// prompt cache holds the last CacheSlots distinct prefixes (the first
// message, or Anthropic's system prompt) per server; a request whose
// prefix is cached reads ceil(len(prefix)/4) of its input tokens from it.
package fakeprovider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Usage is token counts as the fake billed them.
type Usage struct {
	Input, CachedInput, Output int64 // Input excludes CachedInput
}

// Server is the fake provider.
type Server struct {
	*httptest.Server

	mu sync.Mutex
	// Faults, set by tests before the batch is created or ended.
	faults Faults
	// CacheSlots is the prompt cache's size in prefixes. Defaults to 4.
	CacheSlots int
	// PollsToEnd is how many GETs of a batch it stays in progress.
	// Defaults to 1.
	PollsToEnd int

	seq       int
	files     map[string][]byte
	oa        map[string]*oaBatch
	an        map[string]*anBatch
	cache     []string
	submitted map[string]int // custom_id → times in a created batch
	direct    map[string]int // custom_id → direct calls
	billed    map[string]Usage
	batches   int
}

// Faults are failures injected into the next batches.
type Faults struct {
	// Submit429 refuses the next n batch creations with a 429.
	Submit429 int
	// RetryAfter is the 429's Retry-After in seconds. Defaults to 1.
	RetryAfter int
	// Fail maps custom_ids to an error for their next result: "server"
	// (retryable 500), "invalid" (a 400 that is not).
	Fail map[string]string
	// Drop leaves custom_ids out of their batch's results file once.
	Drop map[string]bool
	// Malformed writes a line for custom_ids once that names the custom_id
	// but does not decode.
	Malformed map[string]bool
	// Garbage adds a line to every results file that is not JSON.
	Garbage bool
	// Expire makes the next n batches expire with only their first half
	// of requests done.
	Expire int
}

// New starts a fake on loopback. Close it with Close.
func New() *Server {
	s := &Server{CacheSlots: 4, PollsToEnd: 1, files: map[string][]byte{}, oa: map[string]*oaBatch{}, an: map[string]*anBatch{},
		submitted: map[string]int{}, direct: map[string]int{}, billed: map[string]Usage{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/files", s.oaUpload)
	mux.HandleFunc("GET /v1/files/{id}/content", s.oaContent)
	mux.HandleFunc("POST /v1/batches", s.oaCreate)
	mux.HandleFunc("GET /v1/batches/{id}", s.oaGet)
	mux.HandleFunc("GET /v1/batches", s.oaList)
	mux.HandleFunc("POST /v1/chat/completions", s.oaDirect)
	mux.HandleFunc("POST /v1/messages/batches", s.anCreate)
	mux.HandleFunc("GET /v1/messages/batches/{id}", s.anGet)
	mux.HandleFunc("GET /v1/messages/batches/{id}/results", s.anResults)
	mux.HandleFunc("POST /v1/messages", s.anDirect)
	s.Server = httptest.NewServer(mux)
	return s
}

// SetFaults replaces the injected faults.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Submitted returns how many created batches held each custom_id.
func (s *Server) Submitted() map[string]int { return s.copyCounts(s.submitted) }

// Direct returns how many direct calls each custom_id made.
func (s *Server) Direct() map[string]int { return s.copyCounts(s.direct) }

// Batches returns how many batches were created.
func (s *Server) Batches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batches
}

// Billed returns the usage of every successful response the fake
// returned, by "batch" or "direct" and model: "batch/gpt-4o-mini".
func (s *Server) Billed() map[string]Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Usage, len(s.billed))
	for k, v := range s.billed {
		out[k] = v
	}
	return out
}

func (s *Server) copyCounts(m map[string]int) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (s *Server) id(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s_%06d", prefix, s.seq)
}

func tokens(text string) int64 { return int64((len(text) + 3) / 4) }

// usage bills one request (under s.mu): prompt parts, max_tokens.
func (s *Server) usage(mode, model, prefix, rest string, maxTokens int64) Usage {
	out := int64(16)
	if maxTokens > 0 && maxTokens < out {
		out = maxTokens
	}
	u := Usage{Input: tokens(prefix) + tokens(rest), Output: out}
	hit := -1
	for i, p := range s.cache {
		if p == prefix {
			hit = i
		}
	}
	if hit >= 0 && prefix != "" {
		u.CachedInput = tokens(prefix)
		u.Input -= u.CachedInput
		s.cache = append(s.cache[:hit], s.cache[hit+1:]...)
	}
	if prefix != "" {
		s.cache = append(s.cache, prefix)
		if n := max(1, s.CacheSlots); len(s.cache) > n {
			s.cache = s.cache[len(s.cache)-n:]
		}
	}
	k := mode + "/" + model
	b := s.billed[k]
	s.billed[k] = Usage{Input: b.Input + u.Input, CachedInput: b.CachedInput + u.CachedInput, Output: b.Output + u.Output}
	return u
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"type": typ, "message": msg, "code": typ}})
}

// chatParams is the part of an OpenAI chat request the fake reads.
type chatParams struct {
	Model     string `json:"model"`
	MaxTokens int64  `json:"max_tokens"`
	MaxCT     int64  `json:"max_completion_tokens"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func (p chatParams) split() (prefix, rest string) {
	for i, m := range p.Messages {
		if i == 0 {
			prefix = contentText(m.Content)
		} else {
			rest += contentText(m.Content)
		}
	}
	return prefix, rest
}

func (s *Server) chatCompletion(mode string, p chatParams) map[string]any {
	prefix, rest := p.split()
	mt := p.MaxCT
	if mt == 0 {
		mt = p.MaxTokens
	}
	u := s.usage(mode, p.Model, prefix, rest, mt)
	return map[string]any{
		"id": s.id("chatcmpl"), "object": "chat.completion", "created": time.Now().Unix(), "model": p.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "logprobs": nil,
			"message": map[string]any{"role": "assistant", "content": "echo: " + rest, "refusal": nil}}},
		"usage": map[string]any{"prompt_tokens": u.Input + u.CachedInput, "completion_tokens": u.Output,
			"total_tokens": u.Input + u.CachedInput + u.Output, "prompt_tokens_details": map[string]any{"cached_tokens": u.CachedInput}},
	}
}

func (s *Server) oaDirect(w http.ResponseWriter, r *http.Request) {
	var p chatParams
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Model == "" {
		apiError(w, 400, "invalid_request_error", "bad chat request")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.direct[r.Header.Get(TaskHeader)]++
	writeJSON(w, 200, s.chatCompletion("direct", p))
}

// ---- OpenAI batches ----

type oaLine struct {
	CustomID string     `json:"custom_id"`
	Method   string     `json:"method"`
	URL      string     `json:"url"`
	Body     chatParams `json:"body"`
}

type oaBatch struct {
	obj   map[string]any
	lines []oaLine
	polls int
}

func (s *Server) oaUpload(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(64 << 20); err != nil {
		apiError(w, 400, "invalid_request_error", "multipart: "+err.Error())
		return
	}
	if r.FormValue("purpose") != "batch" {
		apiError(w, 400, "invalid_request_error", "purpose must be batch")
		return
	}
	f, hdr, err := r.FormFile("file")
	if err != nil {
		apiError(w, 400, "invalid_request_error", "no file")
		return
	}
	data, _ := io.ReadAll(f)
	s.mu.Lock()
	id := s.id("file")
	s.files[id] = data
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"id": id, "object": "file", "bytes": len(data), "created_at": time.Now().Unix(),
		"filename": hdr.Filename, "purpose": "batch", "status": "processed"})
}

func (s *Server) oaContent(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	data, ok := s.files[r.PathValue("id")]
	s.mu.Unlock()
	if !ok {
		apiError(w, 404, "not_found", "no such file")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(data)
}

func (s *Server) oaCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		InputFileID      string            `json:"input_file_id"`
		Endpoint         string            `json:"endpoint"`
		CompletionWindow string            `json:"completion_window"`
		Metadata         map[string]string `json:"metadata"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, 400, "invalid_request_error", "bad json")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults.Submit429 > 0 {
		s.faults.Submit429--
		ra := s.faults.RetryAfter
		if ra <= 0 {
			ra = 1
		}
		w.Header().Set("Retry-After", strconv.Itoa(ra))
		apiError(w, 429, "rate_limit_exceeded", "too many batches")
		return
	}
	data, ok := s.files[req.InputFileID]
	if !ok || req.Endpoint != "/v1/chat/completions" || req.CompletionWindow != "24h" {
		apiError(w, 400, "invalid_request_error", "bad input_file_id, endpoint or completion_window")
		return
	}
	var lines []oaLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l oaLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.CustomID == "" || l.URL != req.Endpoint || l.Method != "POST" {
			apiError(w, 400, "invalid_request_error", "bad input line")
			return
		}
		lines = append(lines, l)
	}
	for _, l := range lines {
		s.submitted[l.CustomID]++
	}
	s.batches++
	id := s.id("batch")
	md := map[string]any{}
	for k, v := range req.Metadata {
		md[k] = v
	}
	b := &oaBatch{lines: lines, obj: map[string]any{"id": id, "object": "batch", "endpoint": req.Endpoint, "errors": nil,
		"input_file_id": req.InputFileID, "completion_window": "24h", "status": "in_progress", "output_file_id": nil,
		"error_file_id": nil, "created_at": time.Now().Unix(), "in_progress_at": time.Now().Unix(),
		"expires_at": time.Now().Add(24 * time.Hour).Unix(), "metadata": md,
		"request_counts": map[string]any{"total": len(lines), "completed": 0, "failed": 0}}}
	s.oa[id] = b
	writeJSON(w, 200, b.obj)
}

func (s *Server) oaGet(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.oa[r.PathValue("id")]
	if !ok {
		apiError(w, 404, "not_found", "no such batch")
		return
	}
	b.polls++
	if b.obj["status"] == "in_progress" && b.polls >= s.PollsToEnd {
		s.oaEnd(b)
	}
	writeJSON(w, 200, b.obj)
}

func (s *Server) oaList(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.oa))
	for id := range s.oa {
		ids = append(ids, id)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(ids)))
	after := r.URL.Query().Get("after")
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit <= 0 {
		limit = 20
	}
	var data []any
	started := after == ""
	more := false
	for _, id := range ids {
		if !started {
			started = id == after
			continue
		}
		if len(data) == limit {
			more = true
			break
		}
		data = append(data, s.oa[id].obj)
	}
	first, last := "", ""
	if len(data) > 0 {
		first, last = data[0].(map[string]any)["id"].(string), data[len(data)-1].(map[string]any)["id"].(string)
	}
	writeJSON(w, 200, map[string]any{"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": more})
}

// oaEnd finishes b (under s.mu): results to an output file, errors to an
// error file, per the faults.
func (s *Server) oaEnd(b *oaBatch) {
	expire := s.faults.Expire > 0
	if expire {
		s.faults.Expire--
	}
	var out, errs bytes.Buffer
	done, failed := 0, 0
	for i, l := range b.lines {
		id := l.CustomID
		rid := s.id("batch_req")
		switch {
		case expire && i >= len(b.lines)/2:
			fmt.Fprintf(&errs, `{"id":%q,"custom_id":%q,"response":null,"error":{"code":"batch_expired","message":"This request could not be executed before the completion window expired."}}`+"\n", rid, id)
			failed++
		case s.faults.Drop[id]:
			delete(s.faults.Drop, id)
		case s.faults.Malformed[id]:
			delete(s.faults.Malformed, id)
			fmt.Fprintf(&out, `{"id":%q,"custom_id":%q,"response":{"status_code":200,"request_id":"r","body":{"id":"x","usage":{"prompt_tokens":"many"}}},"error":null}`+"\n", rid, id)
			done++
		case s.faults.Fail[id] != "":
			code, typ := 500, "server_error"
			if s.faults.Fail[id] == "invalid" {
				code, typ = 400, "invalid_request_error"
			}
			delete(s.faults.Fail, id)
			fmt.Fprintf(&errs, `{"id":%q,"custom_id":%q,"response":{"status_code":%d,"request_id":"r","body":{"error":{"message":"injected","type":%q,"param":null,"code":null}}},"error":null}`+"\n", rid, id, code, typ)
			failed++
		default:
			body, _ := json.Marshal(s.chatCompletion("batch", l.Body))
			fmt.Fprintf(&out, `{"id":%q,"custom_id":%q,"response":{"status_code":200,"request_id":"r","body":%s},"error":null}`+"\n", rid, id, body)
			done++
		}
	}
	if s.faults.Garbage {
		out.WriteString("{{{ not json\n")
	}
	b.obj["status"] = "completed"
	if expire {
		b.obj["status"] = "expired"
		b.obj["expired_at"] = time.Now().Unix()
	} else {
		b.obj["completed_at"] = time.Now().Unix()
	}
	if out.Len() > 0 {
		id := s.id("file")
		s.files[id] = out.Bytes()
		b.obj["output_file_id"] = id
	}
	if errs.Len() > 0 {
		id := s.id("file")
		s.files[id] = errs.Bytes()
		b.obj["error_file_id"] = id
	}
	b.obj["request_counts"] = map[string]any{"total": len(b.lines), "completed": done, "failed": failed}
}
