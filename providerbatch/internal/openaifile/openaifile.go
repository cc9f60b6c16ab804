// Package openaifile decodes OpenAI Batch API output and error files and
// a chat completion's usage. It imports no SDK: package openai uses it,
// and .ci/fuzz fuzzes it without building the SDK with fuzzing
// instrumentation (minutes a build).
package openaifile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/switchyard-dev/switchyard/providerbatch"
	"github.com/switchyard-dev/switchyard/spend"
)

// completionUsage is the usage of a chat completion, decoded strictly.
type completionUsage struct {
	Usage *struct {
		PromptTokens     *int64 `json:"prompt_tokens"`
		CompletionTokens *int64 `json:"completion_tokens"`
		Details          *struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// Usage decodes a chat completion's usage strictly: cached prompt tokens
// are reported apart from the rest of the input.
func Usage(body json.RawMessage) (spend.Usage, error) {
	var c completionUsage
	if err := json.Unmarshal(body, &c); err != nil {
		return spend.Usage{}, fmt.Errorf("decode usage: %w", err)
	}
	if c.Usage == nil || c.Usage.PromptTokens == nil || c.Usage.CompletionTokens == nil {
		return spend.Usage{}, errors.New("response has no usage")
	}
	var cached int64
	if c.Usage.Details != nil {
		cached = c.Usage.Details.CachedTokens
	}
	u := spend.Usage{Input: *c.Usage.PromptTokens - cached, CachedInput: cached, Output: *c.Usage.CompletionTokens}
	if err := u.Validate(); err != nil || cached > *c.Usage.PromptTokens {
		return spend.Usage{}, fmt.Errorf("usage out of range: prompt %d, cached %d, completion %d", *c.Usage.PromptTokens, cached, *c.Usage.CompletionTokens)
	}
	return u, nil
}

// resultLine is one line of an output or error file.
type resultLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// ParseResults decodes an output or error file. A line that is not JSON,
// or names no custom_id, is skipped (its item counts as missing); a line
// with a custom_id whose response cannot be used yields an ItemError with
// Code "malformed". It fails only when the file cannot be read.
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
	switch {
	case l.Error != nil:
		// batch_expired and the like: the request never ran.
		return providerbatch.Result{CustomID: id, Err: &providerbatch.ItemError{Code: l.Error.Code, Message: l.Error.Message, Retryable: true}}
	case l.Response == nil:
		return bad("line has neither response nor error")
	case l.Response.StatusCode == http.StatusOK:
		u, err := Usage(l.Response.Body)
		if err != nil {
			return bad(err.Error())
		}
		return providerbatch.Result{CustomID: id, Body: l.Response.Body, Usage: u}
	default:
		var e struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(l.Response.Body, &e)
		code := e.Error.Type
		if code == "" {
			code = strconv.Itoa(l.Response.StatusCode)
		}
		retry := l.Response.StatusCode >= 500 || l.Response.StatusCode == http.StatusTooManyRequests
		return providerbatch.Result{CustomID: id, Err: &providerbatch.ItemError{Code: code, Message: fmt.Sprintf("status %d: %s", l.Response.StatusCode, e.Error.Message), Retryable: retry}}
	}
}
