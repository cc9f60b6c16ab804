// Package anthropicfile decodes Anthropic Message Batches results files
// and a message's usage. It imports no SDK: package anthropic uses it,
// and .ci/fuzz fuzzes it without building the SDK with fuzzing
// instrumentation (minutes a build).
package anthropicfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/switchyard-dev/switchyard/providerbatch"
	"github.com/switchyard-dev/switchyard/spend"
)

// messageUsage is a message's usage, decoded strictly.
type messageUsage struct {
	Usage *struct {
		InputTokens   *int64 `json:"input_tokens"`
		OutputTokens  *int64 `json:"output_tokens"`
		CacheRead     int64  `json:"cache_read_input_tokens"`
		CacheCreation int64  `json:"cache_creation_input_tokens"`
	} `json:"usage"`
}

// Usage maps a message's usage: cache-creation tokens count as input.
func Usage(msg json.RawMessage) (spend.Usage, error) {
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
		u, err := Usage(l.Result.Message)
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
