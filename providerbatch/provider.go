package providerbatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/spend"
)

// Item is one request of a batch: CustomID is the task's ID, Params the
// provider's request body (chat-completion parameters for OpenAI, message
// parameters for Anthropic) as JSON.
type Item struct {
	CustomID string
	Model    string
	Params   json.RawMessage
}

// State is a provider batch's processing state, mapped from the
// provider's own.
type State string

const (
	// Running: validating, in progress, finalizing, cancelling.
	Running State = "running"
	// Ended: every request has a result (succeeded or errored).
	Ended State = "ended"
	// Expired: the provider's window passed; some requests have no result.
	Expired State = "expired"
	// Failed: the provider refused the whole batch (validation).
	Failed State = "failed"
	// Cancelled: the batch was cancelled; unfinished requests have no
	// result.
	Cancelled State = "cancelled"
)

// Status is what Poll reports.
type Status struct {
	State State
	// Err is the provider's reason for a Failed batch.
	Err string
}

// Result is one request's outcome.
type Result struct {
	CustomID string
	// Body is the provider's response body (a chat completion, a
	// message) on success.
	Body  json.RawMessage
	Usage spend.Usage
	// Err is set when the request failed; Body is then nil.
	Err *ItemError
}

// ItemError is a failed request of a batch.
type ItemError struct {
	// Code is the provider's error type or HTTP status ("server_error",
	// "invalid_request_error", "429", "expired", "malformed").
	Code    string
	Message string
	// Retryable reports that the same request may succeed if sent again
	// (server errors, rate limits, expiry); invalid requests are not.
	Retryable bool
}

func (e *ItemError) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Provider is one provider's batch API, plus its direct call for the
// items that cannot wait. Implementations: providerbatch/openai,
// providerbatch/anthropic. Every method is called with a bounded context
// and must not retry on its own beyond the SDK's defaults.
type Provider interface {
	// Name is the provider's name in the price table ("openai").
	Name() string
	// Submit creates one batch of items and returns the provider's batch
	// ID. localID identifies the batch locally (recorded as metadata
	// where the provider keeps it, see Finder). A *SubmitError with
	// NotCreated reports that no batch was created (a 429, a 400): the
	// items may be submitted again.
	Submit(ctx context.Context, localID string, items []Item) (string, error)
	// Poll returns the batch's state.
	Poll(ctx context.Context, batchID string) (Status, error)
	// Results returns the outcome of every request that has one. Requests
	// without a result (expired, cancelled, missing from the file) are
	// simply absent, or present with a Retryable error. A line that cannot
	// be decoded but names its custom_id yields an ItemError with Code
	// "malformed"; one that does not is skipped (its item is then missing
	// and handled as such).
	Results(ctx context.Context, batchID string) ([]Result, error)
	// Call makes the request directly (not batched), for an item whose
	// deadline a batch would miss.
	Call(ctx context.Context, it Item) (Result, error)
}

// Finder is implemented by providers that can find a batch by the localID
// given to Submit (OpenAI keeps it as batch metadata). It closes the one
// window in which a crash could submit a batch twice: after the provider
// created it, before its ID was recorded.
type Finder interface {
	Find(ctx context.Context, localID string, createdAfter time.Time) (batchID string, found bool, err error)
}

// ErrNotCreated is matched by a *SubmitError whose batch was not created.
var ErrNotCreated = errors.New("provider batch not created")

// SubmitError is a failed Submit.
type SubmitError struct {
	// NotCreated reports that the provider created no batch (the request
	// was refused), so submitting the items again cannot duplicate them.
	NotCreated bool
	// RetryAfter is the provider's requested wait (a 429), or 0.
	RetryAfter time.Duration
	Err        error
}

func (e *SubmitError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("submit batch (retry after %s): %v", e.RetryAfter, e.Err)
	}
	return fmt.Sprintf("submit batch: %v", e.Err)
}

func (e *SubmitError) Unwrap() error { return e.Err }

// Is matches ErrNotCreated when NotCreated.
func (e *SubmitError) Is(target error) bool { return target == ErrNotCreated && e.NotCreated }
