package admin

import (
	"encoding/json"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// The wire types of the HTTP API: snake_case names, RFC 3339 times (absent
// when zero), durations in milliseconds with an _ms suffix. Task arguments
// (args) are only filled in for the admin role.

type laneJSON struct {
	Lane          string  `json:"lane"`
	Ready         int64   `json:"ready"`
	InFlight      int64   `json:"in_flight"`
	Delayed       int64   `json:"delayed"`
	DeadLettered  int64   `json:"dead_lettered"`
	OldestReadyMS float64 `json:"oldest_ready_ms"`
	ObjectiveMS   float64 `json:"objective_ms"`
	Late          bool    `json:"late"`
	Paused        bool    `json:"paused"`
	PausedBy      string  `json:"paused_by,omitempty"`
	// PauseKnown is false when the admin API has no ledger: paused is then
	// unknown, not false.
	PauseKnown bool `json:"pause_known"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func tp(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func laneOut(l LaneInfo) laneJSON {
	return laneJSON{
		Lane: l.Lane, Ready: l.Ready, InFlight: l.InFlight, Delayed: l.Delayed, DeadLettered: l.DeadLettered,
		OldestReadyMS: ms(l.OldestReady), ObjectiveMS: ms(l.Objective), Late: l.Late, Paused: l.Paused, PausedBy: l.PausedBy,
		PauseKnown: l.PauseKnown,
	}
}

// laneEventJSON is a pause or resume of a lane (ledger.LaneEvent).
type laneEventJSON struct {
	Lane   string    `json:"lane"`
	Action string    `json:"action"` // "pause" or "resume"
	Paused bool      `json:"paused"` // the lane's state after the change
	Actor  string    `json:"actor"`
	At     time.Time `json:"at"`
}

func laneEventOut(e ledger.LaneEvent) laneEventJSON {
	action := "resume"
	if e.Paused {
		action = "pause"
	}
	return laneEventJSON{Lane: e.Lane, Action: action, Paused: e.Paused, Actor: e.Actor, At: e.At.UTC()}
}

// payload renders stored bytes: JSON as itself, anything else as a JSON
// string (invalid UTF-8 replaced), so an undecodable payload can still be
// looked at.
func payload(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

type taskJSON struct {
	ID             string            `json:"id"`
	Kind           string            `json:"kind"`
	Lane           string            `json:"lane"`
	Tenant         string            `json:"tenant"`
	State          ledger.State      `json:"state"`
	Attempt        int               `json:"attempt"`
	NextAttempt    int               `json:"next_attempt,omitempty"` // queued or waiting to retry: the number the next attempt takes
	MaxAttempts    int               `json:"max_attempts"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	OrderingKey    string            `json:"ordering_key,omitempty"`
	RunAt          *time.Time        `json:"run_at,omitempty"`
	Deadline       *time.Time        `json:"deadline,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	LastError      string            `json:"last_error,omitempty"`
	Result         json.RawMessage   `json:"result,omitempty"`
	Args           json.RawMessage   `json:"args,omitempty"`
	CreatedAt      *time.Time        `json:"created_at,omitempty"`
	UpdatedAt      *time.Time        `json:"updated_at,omitempty"`
}

func taskOut(t *ledger.Task, withArgs bool) taskJSON {
	out := taskJSON{
		ID: t.ID, Kind: t.Kind, Lane: t.Lane, Tenant: t.Tenant, State: t.State, Attempt: t.Attempt, NextAttempt: t.NextAttempt(),
		MaxAttempts: t.MaxAttempts, IdempotencyKey: t.IdempotencyKey, OrderingKey: t.OrderingKey,
		RunAt: tp(t.RunAt), Deadline: tp(t.Deadline), Metadata: t.Metadata, LastError: t.LastError,
		Result: payload(t.Result), CreatedAt: tp(t.CreatedAt), UpdatedAt: tp(t.UpdatedAt),
	}
	if withArgs {
		out.Args = payload(t.Args)
	}
	return out
}

type attemptJSON struct {
	Number     int        `json:"number"`
	Worker     string     `json:"worker,omitempty"`
	Start      *time.Time `json:"start,omitempty"`
	DurationMS float64    `json:"duration_ms"`
	Outcome    string     `json:"outcome"`
	Class      string     `json:"class,omitempty"`
	Error      string     `json:"error,omitempty"`
	Stack      string     `json:"stack,omitempty"`
}

type eventJSON struct {
	Seq    int64        `json:"seq"`
	At     *time.Time   `json:"at,omitempty"`
	From   ledger.State `json:"from"`
	To     ledger.State `json:"to"`
	Reason string       `json:"reason"`
	Detail string       `json:"detail,omitempty"`
	Actor  string       `json:"actor,omitempty"`
}

type effectJSON struct {
	Key       string             `json:"key"`
	State     ledger.EffectState `json:"state"`
	Attempt   int                `json:"attempt"`
	Result    json.RawMessage    `json:"result,omitempty"`
	UpdatedAt *time.Time         `json:"updated_at,omitempty"`
}

type taskDetailJSON struct {
	Task     taskJSON      `json:"task"`
	Attempts []attemptJSON `json:"attempts"`
	Events   []eventJSON   `json:"events"`
	Effects  []effectJSON  `json:"effects"`
}

func attemptsOut(as []ledger.Attempt, withStack bool) []attemptJSON {
	out := make([]attemptJSON, 0, len(as))
	for _, a := range as {
		j := attemptJSON{Number: a.Number, Worker: a.Worker, Start: tp(a.Start), DurationMS: ms(a.Duration),
			Outcome: a.Outcome, Class: a.Class, Error: a.Error}
		if withStack {
			j.Stack = a.Stack
		}
		out = append(out, j)
	}
	return out
}

func taskDetailOut(info *switchyard.TaskInfo, withArgs bool) taskDetailJSON {
	out := taskDetailJSON{
		Task:     taskOut(info.Task, withArgs),
		Attempts: attemptsOut(info.Attempts, true),
		Events:   make([]eventJSON, 0, len(info.Events)),
		Effects:  make([]effectJSON, 0, len(info.Effects)),
	}
	for _, e := range info.Events {
		out.Events = append(out.Events, eventJSON{Seq: e.Seq, At: tp(e.At), From: e.From, To: e.To, Reason: e.Reason, Detail: e.Detail, Actor: e.Actor})
	}
	for _, e := range info.Effects {
		out.Effects = append(out.Effects, effectJSON{Key: e.Key, State: e.State, Attempt: e.Attempt, Result: payload(e.Result), UpdatedAt: tp(e.UpdatedAt)})
	}
	return out
}

// statusJSON is the ingestion status: the call-now, fetch-later answer.
type statusJSON struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"`
	State       ledger.State    `json:"state"`
	Done        bool            `json:"done"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	Attempts    []attemptJSON   `json:"attempts"`
	Result      json.RawMessage `json:"result,omitempty"`
	LastError   string          `json:"last_error,omitempty"`
	CreatedAt   *time.Time      `json:"created_at,omitempty"`
	UpdatedAt   *time.Time      `json:"updated_at,omitempty"`
}

func statusOut(info *switchyard.TaskInfo) statusJSON {
	t := info.Task
	return statusJSON{
		ID: t.ID, Kind: t.Kind, State: t.State, Done: t.State.Terminal(), Attempt: t.Attempt, MaxAttempts: t.MaxAttempts,
		Attempts: attemptsOut(info.Attempts, false), Result: payload(t.Result), LastError: t.LastError,
		CreatedAt: tp(t.CreatedAt), UpdatedAt: tp(t.UpdatedAt),
	}
}

type deadAttemptJSON struct {
	Attempt    int        `json:"attempt"`
	Start      *time.Time `json:"start,omitempty"`
	DurationMS float64    `json:"duration_ms"`
	Class      string     `json:"class,omitempty"`
	Error      string     `json:"error,omitempty"`
	Worker     string     `json:"worker,omitempty"`
}

type deadJSON struct {
	ID       string            `json:"id"`
	Lane     string            `json:"lane"`
	Kind     string            `json:"kind"`
	Tenant   string            `json:"tenant"`
	Reason   broker.Reason     `json:"reason"`
	Error    string            `json:"error"`
	Attempts []deadAttemptJSON `json:"attempts"`
	// AttemptsMade counts the attempts (attempts may hold the last only).
	AttemptsMade int `json:"attempts_made"`
	// SandboxOf marks a sandbox replay's dead letter: the original's ID.
	SandboxOf string          `json:"sandbox_of,omitempty"`
	DeadAt    *time.Time      `json:"dead_at,omitempty"`
	Args      json.RawMessage `json:"args,omitempty"`
}

func deadOut(d DeadItem, withArgs bool) deadJSON {
	out := deadJSON{ID: d.ID, Lane: d.Lane, Kind: d.Kind, Tenant: d.Tenant, Reason: d.Reason, Error: d.Error,
		Attempts: make([]deadAttemptJSON, 0, len(d.Attempts)), AttemptsMade: d.AttemptsMade, SandboxOf: d.SandboxOf, DeadAt: tp(d.DeadAt)}
	for _, a := range d.Attempts {
		out.Attempts = append(out.Attempts, deadAttemptJSON{Attempt: a.Attempt, Start: tp(a.Start), DurationMS: ms(a.Duration),
			Class: a.Class, Error: a.Error, Worker: a.Worker})
	}
	if withArgs {
		out.Args = payload(d.Payload)
	}
	return out
}

type reviewJSON struct {
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	Lane      string          `json:"lane"`
	Tenant    string          `json:"tenant"`
	Reason    string          `json:"reason"`
	Action    string          `json:"action"`
	Since     *time.Time      `json:"since,omitempty"`
	AgeMS     float64         `json:"age_ms"`
	ClaimedBy string          `json:"claimed_by,omitempty"`
	Args      json.RawMessage `json:"args,omitempty"`
}

func reviewOut(it *switchyard.ReviewItem, withArgs bool) reviewJSON {
	out := reviewJSON{ID: it.Task.ID, Kind: it.Task.Kind, Lane: it.Task.Lane, Tenant: it.Task.Tenant,
		Reason: it.Reason, Action: it.Action, Since: tp(it.Since), AgeMS: ms(it.Age), ClaimedBy: it.ClaimedBy}
	if withArgs {
		out.Args = payload(it.Task.Args)
	}
	return out
}

type reportJSON struct {
	Done      int             `json:"done"`
	Failed    []itemErrorJSON `json:"failed"`
	Truncated bool            `json:"truncated"`
}

type itemErrorJSON struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}

func reportOut(r *Report) reportJSON {
	out := reportJSON{Failed: []itemErrorJSON{}}
	if r == nil {
		return out
	}
	out.Done, out.Truncated = r.Done, r.Truncated
	for _, f := range r.Failed {
		out.Failed = append(out.Failed, itemErrorJSON{ID: f.ID, Error: f.Err})
	}
	return out
}

// deadFilterJSON is the filter of a bulk dead-letter operation.
type deadFilterJSON struct {
	Lane   string `json:"lane"`
	Kind   string `json:"kind"`
	Tenant string `json:"tenant"`
	Reason string `json:"reason"`
}

func (f *deadFilterJSON) empty() bool {
	return f == nil || (f.Lane == "" && f.Kind == "" && f.Tenant == "" && f.Reason == "")
}

// bulkJSON is the body of POST dead/replay|move|purge.
type bulkJSON struct {
	IDs    []string        `json:"ids"`
	Filter *deadFilterJSON `json:"filter"`
	ToLane string          `json:"to_lane"`
	Max    int             `json:"max"`
}

// ingestJSON is the body of POST /api/v1/tasks: an EnqueueRequest, with
// the delay also accepted in milliseconds.
type ingestJSON struct {
	EnqueueRequest
	DelayMS *int64 `json:"delay_ms,omitempty"`
}

type enqueuedJSON struct {
	ID        string       `json:"id"`
	State     ledger.State `json:"state,omitempty"`
	Duplicate bool         `json:"duplicate"`
	StatusURL string       `json:"status_url"`
}
