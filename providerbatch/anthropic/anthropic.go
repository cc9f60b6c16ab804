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
	"github.com/switchyard-dev/switchyard/spend"
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
	u, err := usageOf(raw)
	if err != nil {
		return providerbatch.Result{CustomID: it.CustomID, Err: &providerbatch.ItemError{Code: "malformed", Message: err.Error()}}, nil
	}
	return providerbatch.Result{CustomID: it.CustomID, Body: raw, Usage: u}, nil
}

// messageUsage is a message's usage, decoded strictly.
type messageUsage struct {
	Usage *struct {
		InputTokens   *int64 `json:"input_tokens"`
		OutputTokens  *int64 `json:"output_tokens"`
		CacheRead     int64  `json:"cache_read_input_tokens"`
		CacheCreation int64  `json:"cache_creation_input_tokens"`
	} `json:"usage"`
}

// usageOf maps a message's usage: cache-creation tokens count as input.
func usageOf(msg json.RawMessage) (spend.Usage, error) {
	var m messageUsage
	if err := json.Unmarshal(msg, &m); err != nil {
		return spend.Usage{}, fmt.Errorf("decode usage: %w", err)
	}
	if m.Usage == nil || m.Usage.InputTokens == nil || m.Usage.OutputTokens == nil {
		return spend.Usage{}, errors.New("message has no usage")
	}
	u := spend.Usage{Input: *m.Usage.InputTokens + m.Usage.CacheCreation, CachedInput: m.Usage.CacheRead, Output: *m.Usage.OutputTokens}
	if err := u.Validate(); err != nil || m.Usage.CacheCreation < 0 {
		return spend.Usage{}, fmt.Errorf("usage out of range: %+v", u)
	}
	return u, nil
}

type resultLine struct {
	CustomID string `json:"custom_id"`
	Result   *struct {
		Type    string          `json:"type"`
		Message json.RawMessage `json:"message"`
		Error   *struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"error"`
	} `json:"result"`
}

// retryable are the error types of an errored request worth sending again.
var retryable = map[string]bool{"api_error": true, "overloaded_error": true, "rate_limit_error": true, "timeout_error": true}

// ParseResults decodes a results file. A line that is not JSON or names no
// custom_id is skipped (its item counts as missing); a line whose result
// cannot be used yields an ItemError with Code "malformed"; expired and
// canceled requests yield retryable errors. It fails only when the file
// cannot be read.
func ParseResults(r io.Reader) ([]providerbatch.Result, error) {
	return providerbatch.ScanResults(r, parseLine)
}

func parseLine(id string, line []byte) providerbatch.Result {
	bad := func(msg string) providerbatch.Result {
		return providerbatch.Result{CustomID: id, Err: &providerbatch.ItemError{Code: "malformed", Message: msg}}
	}
	var l resultLine
	if err := json.Unmarshal(line, &l); err != nil {
		return bad(err.Error())
	}
	if l.Result == nil {
		return bad("line has no result")
	}
	switch l.Result.Type {
	case "succeeded":
		u, err := usageOf(l.Result.Message)
		if err != nil {
			return bad(err.Error())
		}
		return providerbatch.Result{CustomID: id, Body: l.Result.Message, Usage: u}
	case "errored":
		if l.Result.Error == nil {
			return bad("errored result without an error")
		}
		e := l.Result.Error.Error
		return providerbatch.Result{CustomID: id, Err: &providerbatch.ItemError{Code: e.Type, Message: e.Message, Retryable: retryable[e.Type]}}
	case "expired", "canceled":
		return providerbatch.Result{CustomID: id, Err: &providerbatch.ItemError{Code: l.Result.Type, Message: "request " + l.Result.Type + " before it ran", Retryable: true}}
	}
	return bad(fmt.Sprintf("unknown result type %q", l.Result.Type))
}
