// Package switchyard runs background work — AI-agent steps above all — over
// the message broker a team already has (Amazon SQS, RabbitMQ, Redis through
// asynq, NATS JetStream, or the embedded default that needs no server), with
// the same guarantees on every one.
//
// # The pieces
//
// A Client enqueues typed tasks; a Server runs registered handlers. Below
// them, broker.Broker carries small envelopes that describe work, and an
// optional ledger.Ledger holds the truth about what happened: with it, a
// duplicate delivery or a crash retry never repeats a completed Step or a
// confirmed Effect.
//
//	b, _ := broker.Open(ctx, "embedded:///var/lib/app/switchyard.db", nil)
//	client, _ := switchyard.NewClient(b, nil)
//	client.Enqueue(ctx, SummarizeArgs{DocID: "d1"}, &switchyard.EnqueueOpts{Lane: "interactive"})
//
//	srv, _ := switchyard.NewServer(b, nil)
//	switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[SummarizeArgs]) error {
//		summary, err := switchyard.Step(ctx, "summarize", func(ctx context.Context) (string, error) {
//			return model.Summarize(ctx, t.Args.DocID) // not called again on a retry
//		})
//		...
//	}, nil)
//	srv.Start(ctx)
//	defer srv.Stop(ctx)
//
// # Handler results
//
// A handler returns nil for success, or an error: Permanent (dead-letter at
// once), Cancel, Snooze (re-delay without spending an attempt), RetryAfter,
// UnknownOutcome, AwaitApproval — or any other error, retried with
// exponential backoff and full jitter, then dead-lettered with its whole
// attempt history.
package switchyard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// TaskArgs are a task's typed arguments. Kind names the handler; it is a
// stable string stored with every task, not a Go type name.
type TaskArgs interface {
	Kind() string
}

// ArgsWithOpts lets task arguments carry their own default EnqueueOpts
// (lane, max attempts, …); options given to Enqueue override them field by
// field.
type ArgsWithOpts interface {
	TaskArgs
	EnqueueOpts() EnqueueOpts
}

// EnqueueOpts are per-task options. The zero value of each field means its
// default.
type EnqueueOpts struct {
	// Lane defaults to "scheduled" when RunAt or Delay is set, else "batch".
	Lane string
	// IdempotencyKey makes a second Enqueue with the same key (and tenant)
	// return the first task instead of creating another.
	IdempotencyKey string
	// Tenant scopes idempotency keys and fairness. Defaults to "".
	Tenant string
	// OrderingKey: tasks with the same key start in enqueue order and never
	// run at the same time.
	OrderingKey string
	// RunAt delays the task until then; Delay until now+Delay.
	RunAt time.Time
	Delay time.Duration
	// Deadline: a task not started by then is dead-lettered with reason
	// expired, and a running one has its context cancelled at it.
	Deadline time.Time
	// MaxAttempts overrides the retry policy's limit for this task.
	MaxAttempts int
	// Metadata is small string data kept with the task (in message headers
	// and the ledger). Keys starting with "switchyard-" are reserved for the
	// framework (a sandbox copy's scheduler.MetaSandboxOf, say) and refused.
	Metadata map[string]string
	// ConcurrencyKey (with a ledger): of the live tasks of one tenant and
	// kind that share it, OnConcurrent decides which go on (cancel.go).
	// Defaults to "" (none). Not accepted by EnqueueMany.
	ConcurrencyKey string
	// OnConcurrent is the ConcurrencyKey policy. Defaults to
	// CancelInProgress.
	OnConcurrent ConcurrencyPolicy
	// CacheKey names the prompt prefix the task's model call shares with
	// others (a system prompt, a document): the provider-batch lane orders
	// a batch so that tasks of one key run back to back, and spend reports
	// the cached-token share per key. Kept as metadata
	// scheduler.MetaCacheKey. Defaults to "".
	CacheKey string
}

// EnqueueResult says what Enqueue did.
type EnqueueResult struct {
	ID string
	// Duplicate reports that the idempotency key was already used: ID is
	// the existing task's and nothing new was enqueued.
	Duplicate bool
	// Cancelled reports that the task was recorded cancelled and not
	// published (EnqueueOpts.OnConcurrent CancelNewest).
	Cancelled bool
}

// ClientConfig configures a Client. A nil *ClientConfig means defaults.
type ClientConfig struct {
	// Ledger, when set, records every task at enqueue and deduplicates
	// idempotency keys for as long as the task is kept. When the broker
	// has a codec (broker.Options.Codec), the Client seals the ledger's
	// payloads with it too (ledger.WithCodec): configure encryption once,
	// on the broker. Defaults to nil.
	Ledger ledger.Ledger
	// BeforePublish, when set, is called with every message just before
	// it is published (after validation and ledger recording): the place
	// to inject trace context into m.Headers. Defaults to nil.
	BeforePublish func(ctx context.Context, m *broker.Message)
	// ReliablePush makes Enqueue and EnqueueMany with a ledger that has an
	// outbox succeed while the broker is unreachable: each task is
	// recorded with an outbox row in one ledger write, then published at
	// once; when that publish fails, the task waits in the outbox and the
	// relays publish it once the broker is back (see reliable.go).
	// Defaults to false.
	ReliablePush bool
	// Relay tunes this Client's outbox relay (EnqueueTx, ReliablePush).
	// Defaults to nil: RelayConfig's defaults.
	Relay *RelayConfig
}

// Client enqueues tasks.
type Client struct {
	b             *broker.Broker
	l             ledger.Ledger
	beforePublish func(ctx context.Context, m *broker.Message)
	reliable      bool
	relay         *relay // nil without an outbox; started by the first outbox write
}

// NewClient returns a Client publishing through b.
func NewClient(b *broker.Broker, cfg *ClientConfig) (*Client, error) {
	if b == nil {
		return nil, broker.Invalidf("switchyard: nil broker")
	}
	c := &Client{b: b}
	if cfg != nil {
		c.l, c.beforePublish = ledger.WithCodec(cfg.Ledger, b.Codec()), cfg.BeforePublish
		if cfg.Ledger != nil {
			// Ordering keys on a broker without native ordering are
			// numbered by the ledger's sequencer, shared by every process.
			b.AdoptSequencer(ledger.SequencerOf(cfg.Ledger))
		}
		c.relay = newRelay(b, c.l, cfg.Relay)
		if cfg.ReliablePush && c.relay == nil {
			return nil, broker.Invalidf("switchyard: ReliablePush needs a ledger with an outbox (ledger/sqlite or ledger/postgres)")
		}
		c.reliable = cfg.ReliablePush
	}
	return c, nil
}

// Headers used for task metadata.
const metaPrefix = "meta-"

// reservedPrefix starts the framework's header and metadata names.
const reservedPrefix = "switchyard-"

// Enqueue publishes one task. With a ledger, the task is recorded first and
// a duplicate idempotency key returns the existing task (and publishes
// again only if that task never left the queued state, so an Enqueue whose
// publish failed can simply be retried).
func (c *Client) Enqueue(ctx context.Context, args TaskArgs, opts *EnqueueOpts) (*EnqueueResult, error) {
	m, o, err := c.message(ctx, args, opts)
	if err != nil {
		return nil, err
	}
	body := m.Body
	if err := c.checkConcurrency(&o); err != nil {
		return nil, err
	}
	if o.ConcurrencyKey != "" {
		meta := make(map[string]string, len(o.Metadata)+1)
		for k, v := range o.Metadata {
			meta[k] = v
		}
		meta[metaConcurrencyKey] = o.ConcurrencyKey
		o.Metadata = meta
	}
	var recorded *ledger.Task
	if c.reliable {
		return c.enqueueReliable(ctx, m, o)
	}
	if c.l != nil {
		m.ID = broker.NewID()
		t, created, err := c.l.Create(ctx, &ledger.Task{ID: m.ID, Tenant: o.Tenant, IdempotencyKey: o.IdempotencyKey, Kind: m.Kind,
			Lane: m.Lane, OrderingKey: o.OrderingKey, Args: body, MaxAttempts: o.MaxAttempts, RunAt: o.RunAt, Deadline: o.Deadline, Metadata: o.Metadata})
		if err != nil {
			return nil, err
		}
		if !created {
			if t.State == ledger.Queued && t.Attempt == 0 {
				// Possibly never published (the first Enqueue failed after
				// recording it): publish again under the same ID. When the
				// first publish did land, or another process is enqueuing the
				// same key at this moment, the broker may carry two copies;
				// that costs a delivery, not a run: the ledger runs it once.
				m.ID = t.ID
				m.Lane, m.Kind, m.Body = t.Lane, t.Kind, t.Args
				if c.beforePublish != nil {
					c.beforePublish(ctx, m)
				}
				if _, err := c.b.PublishOne(ctx, m); err != nil {
					return nil, err
				}
			}
			return &EnqueueResult{ID: t.ID, Duplicate: true}, nil
		}
		recorded = t
		if stop, err := c.concurrencyBeforePublish(ctx, t, &o); err != nil || stop {
			if err != nil {
				return nil, err
			}
			return &EnqueueResult{ID: t.ID, Cancelled: true}, nil
		}
	}
	if c.beforePublish != nil {
		c.beforePublish(ctx, m)
	}
	r, err := c.b.PublishOne(ctx, m)
	if err != nil {
		return nil, err
	}
	if c.l != nil {
		// The ledger created this task: it is new, whatever the broker
		// says (another process's re-publish of it may have landed first).
		if err := c.concurrencyAfterPublish(ctx, recorded, &o); err != nil {
			return &EnqueueResult{ID: m.ID}, fmt.Errorf("switchyard: task %s enqueued, but cancelling the older tasks with its concurrency key failed: %w", m.ID, err)
		}
		return &EnqueueResult{ID: m.ID}, nil
	}
	return &EnqueueResult{ID: r.ID, Duplicate: r.Duplicate}, nil
}

// message builds and validates the message for one task: the options
// merged with the args' own, sandbox marking when ctx is a sandboxed
// handler's, metadata and deadline headers.
func (c *Client) message(ctx context.Context, args TaskArgs, opts *EnqueueOpts) (*broker.Message, EnqueueOpts, error) {
	if args == nil {
		return nil, EnqueueOpts{}, broker.Invalidf("switchyard: nil task args")
	}
	// Delays count from the broker's clock (broker.Options.Now), which
	// also decides when they are due.
	now := c.b.Now()
	o := mergeOpts(args, opts, now)
	if o.Delay > 0 {
		if _, err := broker.After("switchyard: delay", now, o.Delay); err != nil {
			return nil, o, err
		}
	}
	if err := broker.ValidateTime("switchyard: deadline", o.Deadline); err != nil {
		return nil, o, err
	}
	for k := range o.Metadata {
		if strings.HasPrefix(k, reservedPrefix) {
			return nil, o, broker.Invalidf("switchyard: metadata key %q: keys starting with %q are reserved", k, reservedPrefix)
		}
	}
	if o.CacheKey != "" {
		if err := broker.ValidateName("switchyard: cache key", o.CacheKey); err != nil {
			return nil, o, err
		}
		meta := make(map[string]string, len(o.Metadata)+1)
		for k, v := range o.Metadata {
			meta[k] = v
		}
		meta[scheduler.MetaCacheKey] = o.CacheKey
		o.Metadata = meta
	}
	sandboxOf, inSandbox := scheduler.SandboxTask(ctx)
	if inSandbox {
		// A sandboxed handler's tasks are sandbox copies too: their effects
		// are recorded, not performed. Their idempotency keys are their
		// own, so a sandbox run can never take the key a real run's task
		// will need.
		meta := make(map[string]string, len(o.Metadata)+1)
		for k, v := range o.Metadata {
			meta[k] = v
		}
		meta[scheduler.MetaSandboxOf] = sandboxOf
		o.Metadata = meta
		if o.IdempotencyKey != "" {
			o.IdempotencyKey = "sandbox:" + sandboxOf + ":" + o.IdempotencyKey
		}
	}
	body, err := json.Marshal(args)
	if err != nil {
		return nil, o, broker.KindError("enqueue", broker.Permanent, broker.ErrInvalid, "encode %s args: %v", args.Kind(), err)
	}
	m := &broker.Message{Lane: o.Lane, Kind: args.Kind(), Body: body, IdempotencyKey: o.IdempotencyKey, Tenant: o.Tenant,
		OrderingKey: o.OrderingKey, RunAt: o.RunAt, MaxAttempts: o.MaxAttempts}
	if !o.Deadline.IsZero() || len(o.Metadata) > 0 {
		m.Headers = map[string]string{}
		if !o.Deadline.IsZero() {
			m.Headers[scheduler.HeaderDeadline] = o.Deadline.UTC().Format(time.RFC3339Nano)
		}
		for k, v := range o.Metadata {
			m.Headers[metaPrefix+k] = v
		}
		if inSandbox {
			m.Headers[scheduler.HeaderSandbox] = sandboxOf
		}
	}
	if err := m.Validate(); err != nil {
		return nil, o, err
	}
	return m, o, nil
}

func mergeOpts(args TaskArgs, opts *EnqueueOpts, now time.Time) EnqueueOpts {
	var o EnqueueOpts
	if a, ok := args.(ArgsWithOpts); ok {
		o = a.EnqueueOpts()
	}
	if opts != nil {
		p := *opts
		if p.Lane != "" {
			o.Lane = p.Lane
		}
		if p.IdempotencyKey != "" {
			o.IdempotencyKey = p.IdempotencyKey
		}
		if p.Tenant != "" {
			o.Tenant = p.Tenant
		}
		if p.OrderingKey != "" {
			o.OrderingKey = p.OrderingKey
		}
		if !p.RunAt.IsZero() {
			o.RunAt = p.RunAt
		}
		if p.Delay > 0 {
			o.Delay = p.Delay
		}
		if !p.Deadline.IsZero() {
			o.Deadline = p.Deadline
		}
		if p.MaxAttempts > 0 {
			o.MaxAttempts = p.MaxAttempts
		}
		if p.Metadata != nil {
			o.Metadata = p.Metadata
		}
		if p.ConcurrencyKey != "" {
			o.ConcurrencyKey = p.ConcurrencyKey
		}
		if p.OnConcurrent != CancelInProgress {
			o.OnConcurrent = p.OnConcurrent
		}
		if p.CacheKey != "" {
			o.CacheKey = p.CacheKey
		}
	}
	if o.Delay > 0 && o.RunAt.IsZero() {
		o.RunAt = now.Add(o.Delay)
	}
	if o.Lane == "" {
		o.Lane = lanes.Batch
		if !o.RunAt.IsZero() {
			o.Lane = lanes.Scheduled
		}
	}
	return o
}

// TaskInfo is a task's record with its history.
type TaskInfo struct {
	Task     *ledger.Task
	Attempts []ledger.Attempt
	Events   []ledger.Event
	Effects  []ledger.Effect
}

// ErrNoLedger is returned by calls that need a ledger when none is
// configured.
var ErrNoLedger = errors.New("switchyard: this needs a ledger (ClientConfig.Ledger)")

// Task looks a task up by ID, with its attempts, events and effects.
func (c *Client) Task(ctx context.Context, id string) (*TaskInfo, error) {
	if c.l == nil {
		return nil, ErrNoLedger
	}
	t, err := c.l.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	info := &TaskInfo{Task: t}
	if info.Attempts, err = c.l.Attempts(ctx, id); err != nil {
		return nil, err
	}
	if info.Events, err = c.l.Events(ctx, id); err != nil {
		return nil, err
	}
	if info.Effects, err = c.l.Effects(ctx, id); err != nil {
		return nil, err
	}
	return info, nil
}

// Task is one delivery of a task to a handler, with typed arguments.
type Task[T TaskArgs] struct {
	ID          string
	Args        T
	Lane        string
	Tenant      string
	Attempt     int
	MaxAttempts int
	EnqueuedAt  time.Time
	// Metadata is the task's metadata (EnqueueOpts.Metadata).
	Metadata map[string]string
	// Review is the reviewer's decision when the task resumed after
	// AwaitApproval, else nil.
	Review *scheduler.Review
	// Job is the untyped view, with the ledger record when there is one.
	Job *scheduler.Job

	result []byte
}

// SetResult stores v (JSON-encoded) as the task's result in the ledger when
// the handler succeeds.
func (t *Task[T]) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("switchyard: encode result: %w", err)
	}
	t.result = b
	return nil
}

// Handler processes tasks of one kind.
type Handler[T TaskArgs] func(ctx context.Context, t *Task[T]) error

// ServerConfig configures a Server; see scheduler.Config for every field
// and its default.
type ServerConfig = scheduler.Config

// HandlerOpts tune one kind's handling; see scheduler.HandlerOpts.
type HandlerOpts = scheduler.HandlerOpts

// Middleware wraps handlers; see scheduler.Middleware and
// ServerConfig.Middleware.
type Middleware = scheduler.Middleware

// Server runs handlers.
type Server struct {
	s     *scheduler.Scheduler
	relay *relay // the outbox relay, when the ledger has an outbox
}

// NewServer returns a Server pulling from b. cfg may be nil. When b has a
// codec (broker.Options.Codec), the Server seals cfg.Ledger's payloads
// with it too (ledger.WithCodec): task arguments and results, step outputs
// and effect results.
func NewServer(b *broker.Broker, cfg *ServerConfig) (*Server, error) {
	if b != nil && cfg != nil && cfg.Ledger != nil && b.Codec() != nil {
		c := *cfg
		c.Ledger = ledger.WithCodec(c.Ledger, b.Codec())
		cfg = &c
	}
	s, err := scheduler.New(b, cfg)
	if err != nil {
		return nil, err
	}
	srv := &Server{s: s}
	if cfg != nil {
		srv.relay = newRelay(b, cfg.Ledger, nil)
	}
	return srv, nil
}

// Register registers h for T's kind. Arguments that do not decode into T
// dead-letter the task with reason undecodable, without retrying.
func Register[T TaskArgs](srv *Server, h Handler[T], opts *HandlerOpts) error {
	var zero T
	kind := zero.Kind()
	return srv.s.Handle(kind, func(ctx context.Context, job *scheduler.Job) ([]byte, error) {
		t := &Task[T]{ID: job.ID, Lane: job.Lane, Tenant: job.Tenant, Attempt: job.Attempt, MaxAttempts: job.MaxAttempts,
			EnqueuedAt: job.EnqueuedAt, Review: job.Review, Job: job}
		if err := json.Unmarshal(job.Args, &t.Args); err != nil {
			return nil, fmt.Errorf("%w: %s args: %v", broker.ErrUndecodable, kind, err)
		}
		for k, v := range job.Headers {
			if len(k) > len(metaPrefix) && k[:len(metaPrefix)] == metaPrefix {
				if t.Metadata == nil {
					t.Metadata = map[string]string{}
				}
				t.Metadata[k[len(metaPrefix):]] = v
			}
		}
		if err := h(ctx, t); err != nil {
			return nil, err
		}
		return t.result, nil
	}, opts)
}

// SetRelay configures the Server's outbox relay (RelayConfig; nil means
// the defaults). Call it before Start; it has no effect after.
func (s *Server) SetRelay(cfg *RelayConfig) {
	if s.relay != nil && !s.relay.running() {
		s.relay = newRelay(s.relay.b, s.relay.l, cfg)
	}
}

// Start begins running tasks, and the outbox relay when the ledger has
// an outbox.
func (s *Server) Start(ctx context.Context) error {
	if err := s.s.Start(ctx); err != nil {
		return err
	}
	s.relay.start()
	return nil
}

// Stop shuts down gracefully; see scheduler.Scheduler.Stop.
func (s *Server) Stop(ctx context.Context) error {
	rerr := s.relay.stop(ctx)
	return errors.Join(s.s.Stop(ctx), rerr)
}

// StopAndCancel cancels running tasks and shuts down; see
// scheduler.Scheduler.StopAndCancel.
func (s *Server) StopAndCancel(ctx context.Context) error {
	rerr := s.relay.stop(ctx)
	return errors.Join(s.s.StopAndCancel(ctx), rerr)
}

// Stopped is closed once the server has stopped.
func (s *Server) Stopped() <-chan struct{} { return s.s.Stopped() }

// Pause stops a lane from starting new tasks; Resume undoes it.
func (s *Server) Pause(lane string) error  { return s.s.Pause(lane) }
func (s *Server) Resume(lane string) error { return s.s.Resume(lane) }

// Scheduler returns the underlying runtime.
func (s *Server) Scheduler() *scheduler.Scheduler { return s.s }

// Handler results, re-exported from scheduler.
var (
	Permanent      = scheduler.Permanent
	Cancel         = scheduler.Cancel
	Snooze         = scheduler.Snooze
	RetryAfter     = scheduler.RetryAfter
	UnknownOutcome = scheduler.UnknownOutcome
	AwaitApproval  = scheduler.AwaitApproval
	Budget         = scheduler.Budget
)

// Step runs fn once per task and memoises its output in the ledger (as
// JSON): a retry or a duplicate delivery gets the stored value back without
// calling fn. Without a ledger, fn always runs.
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var out T
	b, err := scheduler.Step(ctx, name, func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	})
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("switchyard: step %s: stored output does not decode: %w", name, err)
	}
	return out, nil
}

// EffectOpts tune Effect; see scheduler.EffectOpts.
type EffectOpts = scheduler.EffectOpts

// Effect performs a side effect at most once per task once confirmed, and
// reconciles one whose outcome is unknown before repeating it; see
// scheduler.Effect. Its result is stored as JSON. In a sandbox replay
// (Client.ReplaySandbox) do does not run: the effect is recorded as
// would_do and Effect returns T's zero value and a nil error.
func Effect[T any](ctx context.Context, key string, do func(ctx context.Context) (T, error), opts *EffectOpts) (T, error) {
	var out T
	b, err := scheduler.Effect(ctx, key, func(ctx context.Context) ([]byte, error) {
		v, err := do(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	}, opts)
	if err != nil {
		return out, err
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			return out, fmt.Errorf("switchyard: effect %s: stored result does not decode: %w", key, err)
		}
	}
	return out, nil
}
