package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// EnqueueRequest is one task submitted through ingestion or the CLI.
type EnqueueRequest struct {
	Kind           string            `json:"kind"`
	Args           json.RawMessage   `json:"args"`
	Lane           string            `json:"lane,omitempty"`
	Tenant         string            `json:"tenant,omitempty"`
	IdempotencyKey string            `json:"-"` // from the Idempotency-Key header
	OrderingKey    string            `json:"ordering_key,omitempty"`
	RunAt          time.Time         `json:"run_at,omitempty"`
	Delay          string            `json:"delay,omitempty"` // Go duration, e.g. "90s"
	Deadline       time.Time         `json:"deadline,omitempty"`
	MaxAttempts    int               `json:"max_attempts,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	// Actor is who submits the task (the HTTP API sets the token). When
	// set, with a ledger, a newly created task gets a "submitted" event
	// naming it (the ledger's own "enqueued" event names no one).
	Actor Actor `json:"-"`
}

// rawArgs are task arguments already encoded as a JSON object. Client.Enqueue
// encodes them with encoding/json, which writes them as given (compacted).
type rawArgs struct {
	kind string
	args json.RawMessage
}

func (a rawArgs) Kind() string                 { return a.kind }
func (a rawArgs) MarshalJSON() ([]byte, error) { return a.args, nil }

// Enqueue validates and enqueues one task. A request that fails validation
// (unknown kind, bad arguments, bad option) returns an error matching
// broker.ErrInvalid and enqueues nothing. The same idempotency key with the
// same request returns the same task (Duplicate=true); with a different
// request (kind, arguments as JSON values, lane, ordering key, max
// attempts, deadline or metadata; run_at and delay are not compared) it
// returns ErrKeyReused and enqueues nothing. With a ledger the comparison
// is with the task recorded for the key, so it holds across processes;
// without one, Ops remembers the requests of the last 10000 keys it
// enqueued (for the broker's deduplication window), and a key first used
// by another process or before a restart is taken as the same request.
//
// Args must be a JSON object (absent means {}); they become the task's
// arguments as given, compacted. The lane defaults to the kind's
// KindSpec.Lane, then to the Client's default; a request may name another
// lane only if the kind's KindSpec.Lanes allows it (when set), and never a
// fair lane's shard ("batch:fair-3", which would bypass the tenant
// hashing), nor a lane that is not known (KnownLanes: ErrUnknownLane). A
// scoped caller's tasks belong to its tenant; a request naming
// another tenant is invalid.
//
// When the task was enqueued but its "submitted" event (r.Actor) could
// not be recorded, Enqueue returns the result and an error.
func (o *Ops) Enqueue(ctx context.Context, sc Scope, r EnqueueRequest) (*switchyard.EnqueueResult, error) {
	args, opts, err := o.enqueueArgs(sc, r)
	if err != nil {
		return nil, err
	}
	if opts.Lane != "" {
		// Only lanes someone serves: a request must not create queues.
		if err := o.knownLane(ctx, opts.Lane); err != nil {
			return nil, err
		}
	}
	q := requestOf(r, args.args, opts.Lane)
	key := opts.IdempotencyKey
	if key != "" && o.cfg.Ledger == nil && !o.keys.check(opts.Tenant, key, q.fingerprint(), o.now()) {
		return nil, keyReused(key, "request")
	}
	res, err := o.client.Enqueue(ctx, args, opts)
	if err != nil {
		return nil, err
	}
	if key != "" {
		if err := o.checkReuse(ctx, q, opts.Tenant, key, res); err != nil {
			return nil, err
		}
	}
	if r.Actor != "" && !res.Duplicate && o.cfg.Ledger != nil {
		err := o.cfg.Ledger.AppendEvent(ctx, ledger.Event{TaskID: res.ID, At: time.Now(), Reason: "submitted", Actor: r.Actor.String()})
		if err != nil {
			return res, fmt.Errorf("admin: task %s enqueued, but its submitted event was not recorded: %w", res.ID, err)
		}
	}
	return res, nil
}

// checkReuse refuses, with ErrKeyReused, a duplicate res of key whose
// first request (the task the ledger recorded for key) was not q. Without a
// ledger it remembers q for key when res is a new task.
func (o *Ops) checkReuse(ctx context.Context, q request, tenant, key string, res *switchyard.EnqueueResult) error {
	if o.cfg.Ledger == nil {
		if !res.Duplicate {
			o.keys.record(tenant, key, q.fingerprint(), o.now().Add(o.keyWindow()))
		}
		return nil
	}
	if !res.Duplicate {
		return nil
	}
	t, err := o.cfg.Ledger.Get(ctx, res.ID)
	if err != nil {
		return fmt.Errorf("admin: checking the task of Idempotency-Key %q: %w", key, err)
	}
	if f := q.differs(t); f != "" {
		return keyReused(key, f)
	}
	return nil
}

// keyWindow is how long the broker remembers an idempotency key (a day
// when it says forever or nothing).
func (o *Ops) keyWindow() time.Duration {
	if w := o.cfg.Broker.Capabilities().DedupWindow; w > 0 {
		return w
	}
	return 24 * time.Hour
}

// allowedLanes are the lanes a request for a kind of spec may name.
func allowedLanes(spec KindSpec) []string {
	out := slices.Clone(spec.Lanes)
	if spec.Lane != "" && !slices.Contains(out, spec.Lane) {
		out = append([]string{spec.Lane}, out...)
	}
	return out
}

func (o *Ops) enqueueArgs(sc Scope, r EnqueueRequest) (rawArgs, *switchyard.EnqueueOpts, error) {
	if r.Kind == "" {
		return rawArgs{}, nil, broker.Invalidf("kind is required")
	}
	spec, ok := o.cfg.Kinds[r.Kind]
	if !ok {
		return rawArgs{}, nil, broker.Invalidf("unknown kind %q", r.Kind)
	}
	raw := bytes.TrimSpace(r.Args)
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	var obj map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &obj) != nil {
		return rawArgs{}, nil, broker.Invalidf("args of %s must be a JSON object", r.Kind)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return rawArgs{}, nil, broker.Invalidf("args of %s: %v", r.Kind, err)
	}
	if spec.Validate != nil {
		if err := spec.Validate(json.RawMessage(compact.Bytes())); err != nil {
			return rawArgs{}, nil, broker.Invalidf("args of %s: %v", r.Kind, err)
		}
	}
	tenant, ok := sc.tenant(r.Tenant)
	if !ok {
		return rawArgs{}, nil, broker.Invalidf("tenant %q is outside this token's tenant", r.Tenant)
	}
	lane := r.Lane
	if lane == "" {
		lane = spec.Lane
	}
	if lane != "" {
		if err := broker.ValidateName("lane", lane); err != nil {
			return rawArgs{}, nil, err
		}
		if l, _, ok := broker.SplitFairShard(lane); ok {
			return rawArgs{}, nil, broker.Invalidf("lane %q is a shard of fair lane %s: name the lane itself", lane, l)
		}
		if r.Lane != "" && r.Lane != spec.Lane && len(spec.Lanes) > 0 && !slices.Contains(spec.Lanes, r.Lane) {
			return rawArgs{}, nil, broker.Invalidf("kind %s cannot be enqueued to lane %q (allowed: %s)", r.Kind, r.Lane, strings.Join(allowedLanes(spec), ", "))
		}
	}
	opts := &switchyard.EnqueueOpts{Lane: lane, IdempotencyKey: r.IdempotencyKey, Tenant: tenant, OrderingKey: r.OrderingKey,
		RunAt: r.RunAt, Deadline: r.Deadline, MaxAttempts: r.MaxAttempts, Metadata: r.Metadata}
	if r.Delay != "" {
		if !r.RunAt.IsZero() {
			return rawArgs{}, nil, broker.Invalidf("run_at and delay are exclusive")
		}
		d, err := time.ParseDuration(r.Delay)
		if err != nil {
			return rawArgs{}, nil, broker.Invalidf("delay %q is not a duration like 90s or 5m", r.Delay)
		}
		if d < 0 {
			return rawArgs{}, nil, broker.Invalidf("delay %q is negative", r.Delay)
		}
		if _, err := broker.After("delay", time.Now(), d); err != nil {
			return rawArgs{}, nil, err
		}
		opts.Delay = d
	}
	if err := broker.ValidateTime("run_at", r.RunAt); err != nil {
		return rawArgs{}, nil, err
	}
	if err := broker.ValidateTime("deadline", r.Deadline); err != nil {
		return rawArgs{}, nil, err
	}
	if r.MaxAttempts < 0 || r.MaxAttempts > broker.MaxAttemptsLimit {
		return rawArgs{}, nil, broker.Invalidf("max_attempts %d is outside 0..%d", r.MaxAttempts, broker.MaxAttemptsLimit)
	}
	// The message's own checks (keys, metadata), before anything is
	// recorded.
	m := &broker.Message{Lane: "x", Kind: r.Kind, Tenant: tenant, IdempotencyKey: r.IdempotencyKey, OrderingKey: r.OrderingKey}
	if len(r.Metadata) > 0 {
		m.Headers = map[string]string{}
		for k, v := range r.Metadata {
			m.Headers["meta-"+k] = v
		}
	}
	if err := m.Validate(); err != nil {
		return rawArgs{}, nil, err
	}
	return rawArgs{kind: r.Kind, args: compact.Bytes()}, opts, nil
}
