// Package openai is the provider-batch lane's adapter for OpenAI's Batch
// API, on the official SDK (github.com/openai/openai-go/v3). Importing it
// is what pulls the SDK into a build; package providerbatch does not.
//
// A batch is a JSONL file of chat-completion requests uploaded with
// purpose "batch", then a batch on /v1/chat/completions with a 24h window.
// The local batch ID is kept in the batch's metadata
// ("switchyard_local_id"), which lets Find recover a batch whose creation
// was interrupted before its ID was recorded. Results are read from the
// output and error files; each line is decoded strictly (ParseResults).
//
// Item.Params is a chat-completion request body as JSON (for example
// json.Marshal of an openai.ChatCompletionNewParams).
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/switchyard-dev/switchyard/providerbatch"
	"github.com/switchyard-dev/switchyard/providerbatch/internal/openaifile"
)

// Name is the provider's name in the price table.
const Name = "openai"

// TaskHeader names the task on direct calls (ignored by the API; useful in
// proxies' logs and in tests).
const TaskHeader = "X-Switchyard-Task"

const (
	endpoint = "/v1/chat/completions"
	metaKey  = "switchyard_local_id"
	// maxListPages bounds Find's scan of the batch list.
	maxListPages = 20
)

// Provider implements providerbatch.Provider and providerbatch.Finder.
type Provider struct {
	c oai.Client
}

var (
	_ providerbatch.Provider = (*Provider)(nil)
	_ providerbatch.Finder   = (*Provider)(nil)
)

// New returns the adapter on an SDK client, e.g.
// oai.NewClient(option.WithAPIKey(key)) (the SDK reads OPENAI_API_KEY and
// OPENAI_BASE_URL by default).
func New(c oai.Client) *Provider { return &Provider{c: c} }

// Name implements providerbatch.Provider.
func (p *Provider) Name() string { return Name }

type inputLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// submitErr classifies an SDK error of a create call: a response with a
// 4xx status means nothing was created.
func submitErr(err error) error {
	var ae *oai.Error
	if errors.As(err, &ae) && ae.StatusCode >= 400 && ae.StatusCode < 500 {
		se := &providerbatch.SubmitError{NotCreated: true, Err: err}
		if ae.StatusCode == http.StatusTooManyRequests && ae.Response != nil {
			se.RetryAfter = retryAfter(ae.Response.Header.Get("Retry-After"))
		}
		return se
	}
	return err
}

func retryAfter(v string) time.Duration {
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// Submit implements providerbatch.Provider: upload the JSONL, create the
// batch.
func (p *Provider) Submit(ctx context.Context, localID string, items []providerbatch.Item) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, it := range items {
		if err := enc.Encode(inputLine{CustomID: it.CustomID, Method: "POST", URL: endpoint, Body: it.Params}); err != nil {
			return "", &providerbatch.SubmitError{NotCreated: true, Err: fmt.Errorf("encode item %s: %w", it.CustomID, err)}
		}
	}
	f, err := p.c.Files.New(ctx, oai.FileNewParams{File: oai.File(&buf, localID+".jsonl", "application/jsonl"), Purpose: oai.FilePurposeBatch})
	if err != nil {
		// No batch exists without the file: safe to submit again.
		var se *providerbatch.SubmitError
		if errors.As(submitErr(err), &se) {
			return "", se
		}
		return "", &providerbatch.SubmitError{NotCreated: true, Err: fmt.Errorf("upload: %w", err)}
	}
	b, err := p.c.Batches.New(ctx, oai.BatchNewParams{InputFileID: f.ID, Endpoint: oai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: oai.BatchNewParamsCompletionWindow24h, Metadata: shared.Metadata{metaKey: localID}})
	if err != nil {
		return "", submitErr(err)
	}
	if b.ID == "" {
		return "", errors.New("openai: batch created without an id")
	}
	return b.ID, nil
}

// Find implements providerbatch.Finder: the batch whose metadata names
// localID, among those created after createdAfter.
func (p *Provider) Find(ctx context.Context, localID string, createdAfter time.Time) (string, bool, error) {
	params := oai.BatchListParams{Limit: oai.Int(100)}
	for range maxListPages {
		page, err := p.c.Batches.List(ctx, params)
		if err != nil {
			return "", false, err
		}
		for _, b := range page.Data {
			if b.Metadata[metaKey] == localID {
				return b.ID, true, nil
			}
			if b.CreatedAt < createdAfter.Unix() {
				return "", false, nil
			}
		}
		if !page.HasMore || len(page.Data) == 0 {
			return "", false, nil
		}
		params.After = oai.String(page.Data[len(page.Data)-1].ID)
	}
	return "", false, fmt.Errorf("openai: find batch %s: more than %d pages of batches", localID, maxListPages)
}

// Poll implements providerbatch.Provider.
func (p *Provider) Poll(ctx context.Context, batchID string) (providerbatch.Status, error) {
	b, err := p.c.Batches.Get(ctx, batchID)
	if err != nil {
		return providerbatch.Status{}, err
	}
	return status(b)
}

func status(b *oai.Batch) (providerbatch.Status, error) {
	switch b.Status {
	case oai.BatchStatusValidating, oai.BatchStatusInProgress, oai.BatchStatusFinalizing, oai.BatchStatusCancelling:
		return providerbatch.Status{State: providerbatch.Running}, nil
	case oai.BatchStatusCompleted:
		return providerbatch.Status{State: providerbatch.Ended}, nil
	case oai.BatchStatusExpired:
		return providerbatch.Status{State: providerbatch.Expired}, nil
	case oai.BatchStatusCancelled:
		return providerbatch.Status{State: providerbatch.Cancelled}, nil
	case oai.BatchStatusFailed:
		msg := "batch failed"
		for _, e := range b.Errors.Data {
			msg += "; " + e.Code + ": " + e.Message
		}
		return providerbatch.Status{State: providerbatch.Failed, Err: msg}, nil
	}
	return providerbatch.Status{}, fmt.Errorf("openai: batch %s has unknown status %q", b.ID, b.Status)
}

// Results implements providerbatch.Provider: the output file, then the
// error file.
func (p *Provider) Results(ctx context.Context, batchID string) ([]providerbatch.Result, error) {
	b, err := p.c.Batches.Get(ctx, batchID)
	if err != nil {
		return nil, err
	}
	var out []providerbatch.Result
	for _, id := range []string{b.OutputFileID, b.ErrorFileID} {
		if id == "" {
			continue
		}
		res, err := p.c.Files.Content(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("openai: download %s: %w", id, err)
		}
		rs, err := ParseResults(res.Body)
		res.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("openai: results file %s: %w", id, err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// Call implements providerbatch.Provider: one chat completion.
func (p *Provider) Call(ctx context.Context, it providerbatch.Item) (providerbatch.Result, error) {
	res, err := p.c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{},
		option.WithRequestBody("application/json", []byte(it.Params)), option.WithHeader(TaskHeader, it.CustomID))
	if err != nil {
		var ae *oai.Error
		if errors.As(err, &ae) && ae.StatusCode >= 400 && ae.StatusCode < 500 && ae.StatusCode != http.StatusTooManyRequests {
			return providerbatch.Result{CustomID: it.CustomID, Err: &providerbatch.ItemError{Code: strconv.Itoa(ae.StatusCode), Message: ae.Message}}, nil
		}
		return providerbatch.Result{}, err
	}
	raw := json.RawMessage(res.RawJSON())
	u, err := openaifile.Usage(raw)
	if err != nil {
		return providerbatch.Result{CustomID: it.CustomID, Err: &providerbatch.ItemError{Code: "malformed", Message: err.Error()}}, nil
	}
	return providerbatch.Result{CustomID: it.CustomID, Body: raw, Usage: u}, nil
}

// ParseResults decodes a results file: see openaifile.ParseResults, which
// holds the decoder apart from the SDK so that it can be fuzzed without
// building the SDK with fuzzing instrumentation.
func ParseResults(r io.Reader) ([]providerbatch.Result, error) {
	return openaifile.ParseResults(r)
}
