// Package anthropic is the provider-batch lane's adapter for Anthropic's
// Message Batches API, on the official SDK
// (github.com/anthropics/anthropic-sdk-go/v2). Importing it is what pulls
// the SDK into a build; package providerbatch does not.
//
// A batch is one POST of up to 100,000 requests, each a custom_id and the
// message parameters. Results come as JSONL from the batch's results
// endpoint; each line is decoded strictly (ParseResults). Anthropic keeps
// no metadata on a batch, so this adapter is not a providerbatch.Finder: a
// worker killed after the provider created a batch and before its ID was
// recorded (one HTTP response's time) leaves the items to be submitted
// again (see docs/PROVIDER-BATCH.md).
//
// Item.Params is a message request body as JSON (model, max_tokens,
// messages, system, …; for example json.Marshal of an
// anthropic.MessageNewParams).
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/switchyard-dev/switchyard/providerbatch"
	"github.com/switchyard-dev/switchyard/providerbatch/internal/anthropicfile"
)

// Name is the provider's name in the price table.
const Name = "anthropic"

// TaskHeader names the task on direct calls.
const TaskHeader = "X-Switchyard-Task"

// Provider implements providerbatch.Provider.
type Provider struct {
	c sdk.Client
}

var _ providerbatch.Provider = (*Provider)(nil)

// New returns the adapter on an SDK client, e.g.
// sdk.NewClient(option.WithAPIKey(key)) (the SDK reads ANTHROPIC_API_KEY
// and ANTHROPIC_BASE_URL by default).
func New(c sdk.Client) *Provider { return &Provider{c: c} }

// Name implements providerbatch.Provider.
func (p *Provider) Name() string { return Name }

type batchRequest struct {
	CustomID string          `json:"custom_id"`
	Params   json.RawMessage `json:"params"`
}

// Submit implements providerbatch.Provider.
func (p *Provider) Submit(ctx context.Context, localID string, items []providerbatch.Item) (string, error) {
	reqs := make([]batchRequest, len(items))
	for i, it := range items {
		reqs[i] = batchRequest{CustomID: it.CustomID, Params: it.Params}
	}
	body, err := json.Marshal(map[string]any{"requests": reqs})
	if err != nil {
		return "", &providerbatch.SubmitError{NotCreated: true, Err: err}
	}
	b, err := p.c.Messages.Batches.New(ctx, sdk.MessageBatchNewParams{}, option.WithRequestBody("application/json", body))
	if err != nil {
		var ae *sdk.Error
		if errors.As(err, &ae) && ae.StatusCode >= 400 && ae.StatusCode < 500 {
			se := &providerbatch.SubmitError{NotCreated: true, Err: err}
			if ae.StatusCode == http.StatusTooManyRequests && ae.Response != nil {
				if s, e := strconv.Atoi(ae.Response.Header.Get("Retry-After")); e == nil && s > 0 {
					se.RetryAfter = time.Duration(s) * time.Second
				}
			}
			return "", se
		}
		return "", err
	}
	if b.ID == "" {
		return "", errors.New("anthropic: batch created without an id")
	}
	return b.ID, nil
}

// Poll implements providerbatch.Provider. An ended batch is Ended even
// when some requests expired or were cancelled: those come back in the
// results as retryable errors, so only they are submitted again.
func (p *Provider) Poll(ctx context.Context, batchID string) (providerbatch.Status, error) {
	b, err := p.c.Messages.Batches.Get(ctx, batchID, sdk.MessageBatchGetParams{})
	if err != nil {
		return providerbatch.Status{}, err
	}
	switch b.ProcessingStatus {
	case sdk.MessageBatchProcessingStatusInProgress, sdk.MessageBatchProcessingStatusCanceling:
		return providerbatch.Status{State: providerbatch.Running}, nil
	case sdk.MessageBatchProcessingStatusEnded:
		return providerbatch.Status{State: providerbatch.Ended}, nil
	}
	return providerbatch.Status{}, fmt.Errorf("anthropic: batch %s has unknown processing_status %q", b.ID, b.ProcessingStatus)
}

// Results implements providerbatch.Provider.
func (p *Provider) Results(ctx context.Context, batchID string) ([]providerbatch.Result, error) {
	var res *http.Response
	if err := p.c.Execute(ctx, http.MethodGet, "v1/messages/batches/"+batchID+"/results", nil, &res); err != nil {
		return nil, fmt.Errorf("anthropic: results of %s: %w", batchID, err)
	}
	defer res.Body.Close()
	rs, err := ParseResults(res.Body)
	if err != nil {
		return nil, fmt.Errorf("anthropic: results of %s: %w", batchID, err)
	}
	return rs, nil
}

// Call implements providerbatch.Provider: one message.
func (p *Provider) Call(ctx context.Context, it providerbatch.Item) (providerbatch.Result, error) {
	m, err := p.c.Messages.New(ctx, sdk.MessageNewParams{},
		option.WithRequestBody("application/json", []byte(it.Params)), option.WithHeader(TaskHeader, it.CustomID))
	if err != nil {
		var ae *sdk.Error
		if errors.As(err, &ae) && ae.StatusCode >= 400 && ae.StatusCode < 500 && ae.StatusCode != http.StatusTooManyRequests {
			return providerbatch.Result{CustomID: it.CustomID, Err: &providerbatch.ItemError{Code: strconv.Itoa(ae.StatusCode), Message: err.Error()}}, nil
		}
		return providerbatch.Result{}, err
	}
	raw := json.RawMessage(m.RawJSON())
	u, err := anthropicfile.Usage(raw)
	if err != nil {
		return providerbatch.Result{CustomID: it.CustomID, Err: &providerbatch.ItemError{Code: "malformed", Message: err.Error()}}, nil
	}
	return providerbatch.Result{CustomID: it.CustomID, Body: raw, Usage: u}, nil
}

// ParseResults decodes a results file: see anthropicfile.ParseResults, which
// holds the decoder apart from the SDK so that it can be fuzzed without
// building the SDK with fuzzing instrumentation.
func ParseResults(r io.Reader) ([]providerbatch.Result, error) {
	return anthropicfile.ParseResults(r)
}
