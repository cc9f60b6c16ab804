package ledger

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/switchyard-dev/switchyard/broker"
)

// WithCodec returns L with its payloads sealed by c (codec.AEAD encrypts
// them): task arguments and results, step outputs and effect results are
// sealed on the way in and opened on the way out, so the store holds only
// sealed bytes. Each payload is bound to its place (task ID, plus kind and
// tenant for arguments; step name; effect key): one copied to another row
// or column does not open. IDs, kinds, lanes, tenants, keys, metadata,
// states, error texts and events are not sealed.
//
// A payload that does not open makes the call fail with c's error
// (permanent, matching broker.ErrUndecodable: a step or effect of a running
// task then dead-letters it as undecodable). Empty payloads are stored
// empty. The result implements LaneControls when L does; Unwrap returns L.
//
// Methods that carry payloads, and so are overridden here: Create, Get,
// GetByKey, Transition, List, BeginRun, EndRun, CreateMany (Task.Args, Task.Result,
// TransitionRequest.Result); GetStep, PutStep (step outputs); BeginEffect,
// SetEffect, Effects (Effect.Result). Every other method passes through.
// A method added to Ledger that takes or returns a Task, a step output or
// an Effect must be overridden here too (TestWithCodec_CoversLedger fails
// until it is listed).
//
// Wrapping a ledger already wrapped with the same codec returns it as it
// is, so the root package's Client and Server can wrap whatever ledger
// they are given with their broker's codec.
func WithCodec(L Ledger, c broker.Codec) Ledger {
	if c == nil || L == nil || CodecOf(L) == c {
		return L
	}
	cl := &codecLedger{Ledger: L, c: c}
	if lc, ok := L.(LaneControls); ok {
		return &codecLanes{codecLedger: cl, LaneControls: lc}
	}
	return cl
}

type codecLedger struct {
	Ledger
	c broker.Codec
}

type codecLanes struct {
	*codecLedger
	LaneControls
}

var (
	_ Ledger       = (*codecLedger)(nil)
	_ LaneControls = (*codecLanes)(nil)
)

// CodecOf returns the codec L was wrapped with by WithCodec, or nil.
func CodecOf(L Ledger) broker.Codec {
	if cl := codecLedgerOf(L); cl != nil {
		return cl.c
	}
	return nil
}

// codecLedgerOf returns L's codecLedger when L is WithCodec's, or nil.
func codecLedgerOf(L Ledger) *codecLedger {
	switch l := L.(type) {
	case *codecLedger:
		return l
	case *codecLanes:
		return l.codecLedger
	}
	return nil
}

// codecWatcher is a wrapped store's Watcher (WatcherOf), with the task's
// payloads opened as Get opens them.
type codecWatcher struct {
	w Watcher
	l *codecLedger
}

func (c codecWatcher) WatchTask(ctx context.Context, id string) (*Task, error) {
	t, err := c.w.WatchTask(ctx, id)
	if err != nil {
		return t, err
	}
	return c.l.openTask(ctx, t)
}

func (c codecWatcher) FollowTask(ctx context.Context, id string) (*Task, error) {
	t, err := c.w.FollowTask(ctx, id)
	if err != nil {
		return t, err
	}
	return c.l.openTask(ctx, t)
}

// Unwrap returns the ledger WithCodec wrapped.
func (l *codecLedger) Unwrap() Ledger { return l.Ledger }

// Sequencer passes the wrapped store's ordering Sequencer through
// (ordering keys are not sealed).
func (l *codecLedger) Sequencer() broker.Sequencer { return SequencerOf(l.Ledger) }

func aad(purpose string, parts ...string) []byte {
	b := append(make([]byte, 0, 64), "switchyard "...)
	b = append(b, purpose...)
	b = append(b, 0)
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

func argsAAD(t *Task) []byte     { return aad("args", t.ID, t.Kind, t.Tenant) }
func resultAAD(id string) []byte { return aad("result", id) }

func (l *codecLedger) seal(ctx context.Context, what string, b, ad []byte) ([]byte, error) {
	if len(b) == 0 {
		return b, nil
	}
	s, err := l.c.Seal(ctx, b, ad)
	if err != nil {
		return nil, broker.Wrap("ledger: seal "+what, broker.Transient, err)
	}
	return s, nil
}

func (l *codecLedger) open(ctx context.Context, what string, b, ad []byte) ([]byte, error) {
	if len(b) == 0 {
		return b, nil
	}
	p, err := l.c.Open(ctx, b, ad)
	if err != nil {
		return nil, fmt.Errorf("ledger: %s does not open: %w", what, err)
	}
	return p, nil
}

// openTask opens t's arguments and result in place.
func (l *codecLedger) openTask(ctx context.Context, t *Task) (*Task, error) {
	if t == nil {
		return nil, nil
	}
	var err error
	if t.Args, err = l.open(ctx, "task "+t.ID+" args", t.Args, argsAAD(t)); err != nil {
		return nil, err
	}
	if t.Result, err = l.open(ctx, "task "+t.ID+" result", t.Result, resultAAD(t.ID)); err != nil {
		return nil, err
	}
	return t, nil
}

// Create seals t.Args (and t.Result) bound to the task's ID, kind and
// tenant; an empty ID is assigned here, since the seal needs it.
func (l *codecLedger) Create(ctx context.Context, t *Task) (*Task, bool, error) {
	if t == nil {
		return l.Ledger.Create(ctx, t)
	}
	c := *t
	if c.ID == "" {
		c.ID = broker.NewID()
	}
	var err error
	if c.Args, err = l.seal(ctx, "args", c.Args, argsAAD(&c)); err != nil {
		return nil, false, err
	}
	if c.Result, err = l.seal(ctx, "result", c.Result, resultAAD(c.ID)); err != nil {
		return nil, false, err
	}
	got, created, err := l.Ledger.Create(ctx, &c)
	if err != nil {
		return got, created, err
	}
	got, err = l.openTask(ctx, got)
	return got, created, err
}

func (l *codecLedger) Get(ctx context.Context, id string) (*Task, error) {
	t, err := l.Ledger.Get(ctx, id)
	if err != nil {
		return t, err
	}
	return l.openTask(ctx, t)
}

func (l *codecLedger) GetByKey(ctx context.Context, tenant, key string) (*Task, error) {
	t, err := l.Ledger.GetByKey(ctx, tenant, key)
	if err != nil {
		return t, err
	}
	return l.openTask(ctx, t)
}

func (l *codecLedger) Transition(ctx context.Context, req TransitionRequest) (*Task, error) {
	if req.Result != nil {
		var err error
		if req.Result, err = l.seal(ctx, "result", req.Result, resultAAD(req.ID)); err != nil {
			return nil, err
		}
	}
	t, err := l.Ledger.Transition(ctx, req)
	if err != nil {
		return t, err
	}
	return l.openTask(ctx, t)
}

func (l *codecLedger) List(ctx context.Context, f Filter) ([]*Task, error) {
	ts, err := l.Ledger.List(ctx, f)
	if err != nil {
		return ts, err
	}
	for _, t := range ts {
		if _, err := l.openTask(ctx, t); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

func stepAAD(taskID, name string) []byte { return aad("step", taskID, name) }

func (l *codecLedger) GetStep(ctx context.Context, taskID, name string) ([]byte, bool, error) {
	out, ok, err := l.Ledger.GetStep(ctx, taskID, name)
	if err != nil || !ok {
		return out, ok, err
	}
	out, err = l.open(ctx, "step "+name+" output", out, stepAAD(taskID, name))
	return out, err == nil, err
}

func (l *codecLedger) PutStep(ctx context.Context, taskID, name string, output []byte) ([]byte, error) {
	sealed, err := l.seal(ctx, "step output", output, stepAAD(taskID, name))
	if err != nil {
		return nil, err
	}
	stored, err := l.Ledger.PutStep(ctx, taskID, name, sealed)
	if err != nil {
		return stored, err
	}
	return l.open(ctx, "step "+name+" output", stored, stepAAD(taskID, name))
}

func effectAAD(taskID, key string) []byte { return aad("effect", taskID, key) }

func (l *codecLedger) openEffect(ctx context.Context, e *Effect) error {
	var err error
	e.Result, err = l.open(ctx, "effect "+e.Key+" result", e.Result, effectAAD(e.TaskID, e.Key))
	return err
}

func (l *codecLedger) BeginEffect(ctx context.Context, taskID, key string, attempt int) (Effect, bool, error) {
	e, begun, err := l.Ledger.BeginEffect(ctx, taskID, key, attempt)
	if err != nil {
		return e, begun, err
	}
	if e.TaskID == "" {
		e.TaskID = taskID
	}
	if e.Key == "" {
		e.Key = key
	}
	return e, begun, l.openEffect(ctx, &e)
}

func (l *codecLedger) SetEffect(ctx context.Context, taskID, key string, state EffectState, result []byte) error {
	sealed, err := l.seal(ctx, "effect result", result, effectAAD(taskID, key))
	if err != nil {
		return err
	}
	return l.Ledger.SetEffect(ctx, taskID, key, state, sealed)
}

func (l *codecLedger) Effects(ctx context.Context, taskID string) ([]Effect, error) {
	es, err := l.Ledger.Effects(ctx, taskID)
	if err != nil {
		return es, err
	}
	for i := range es {
		if es[i].TaskID == "" {
			es[i].TaskID = taskID
		}
		if err := l.openEffect(ctx, &es[i]); err != nil {
			return nil, err
		}
	}
	return es, nil
}

// BeginRun opens the task it returns (also the one that comes with a
// refusal, when it opens).
func (l *codecLedger) BeginRun(ctx context.Context, req RunStart) (*Task, error) {
	t, err := l.Ledger.BeginRun(ctx, req)
	if t == nil {
		return t, err
	}
	opened, oerr := l.openTask(ctx, t)
	if err != nil {
		if oerr != nil {
			return nil, err
		}
		return opened, err
	}
	return opened, oerr
}

// EndRun seals the transition's result and opens the task it returns.
func (l *codecLedger) EndRun(ctx context.Context, req RunEnd) (*Task, error) {
	if req.Transition != nil && req.Transition.Result != nil {
		tr := *req.Transition
		var err error
		if tr.Result, err = l.seal(ctx, "result", tr.Result, resultAAD(tr.ID)); err != nil {
			return nil, err
		}
		req.Transition = &tr
	}
	t, err := l.Ledger.EndRun(ctx, req)
	if t == nil {
		return t, err
	}
	opened, oerr := l.openTask(ctx, t)
	if err != nil {
		if oerr != nil {
			return nil, err
		}
		return opened, err
	}
	return opened, oerr
}

// CreateMany seals every task's arguments (and result) as Create does, and
// opens the tasks it returns.
func (l *codecLedger) CreateMany(ctx context.Context, ts []*Task) ([]CreateResult, error) {
	sealed := make([]*Task, len(ts))
	var pre []error // per-task sealing errors, reported in place
	for i, t := range ts {
		if t == nil {
			continue
		}
		c := *t
		if c.ID == "" {
			c.ID = broker.NewID()
		}
		var err error
		if c.Args, err = l.seal(ctx, "args", c.Args, argsAAD(&c)); err == nil {
			c.Result, err = l.seal(ctx, "result", c.Result, resultAAD(c.ID))
		}
		if err != nil {
			if pre == nil {
				pre = make([]error, len(ts))
			}
			pre[i] = err
			continue
		}
		sealed[i] = &c
	}
	// Tasks that did not seal are left out of the store's call and get
	// their error in their place.
	var (
		send []*Task
		idx  []int
	)
	for i, c := range sealed {
		if pre != nil && pre[i] != nil {
			continue
		}
		if c == nil {
			c = ts[i] // nil: the store reports it
		}
		send = append(send, c)
		idx = append(idx, i)
	}
	out := make([]CreateResult, len(ts))
	for i := range pre {
		if pre[i] != nil {
			out[i].Err = pre[i]
		}
	}
	if len(send) == 0 {
		return out, nil
	}
	rs, err := l.Ledger.CreateMany(ctx, send)
	if err != nil {
		return nil, err
	}
	for k, r := range rs {
		if r.Task != nil {
			if r.Task, r.Err = l.openTask(ctx, r.Task); r.Err != nil {
				r.Task, r.Created = nil, false
			}
		}
		out[idx[k]] = r
	}
	return out, nil
}
