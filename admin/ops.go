// Package admin is Switchyard's operator surface as a library: the
// operations behind the admin HTTP API, the web dashboard and the command
// line (lanes and their stats, tasks and their timelines, dead letters with
// replay, move and purge, lane pause and resume, the review queue, and
// ingestion), the same for every broker.
//
// Ops holds the operations; Handler serves them over HTTP with bearer-token
// authentication (read-only, enqueue and admin roles, optionally scoped to
// one tenant).
//
// # Dead letters
//
// The broker's dead-letter queue is the source of truth for dead letters.
// Listing them (DeadLetters, DeadList, DeadLetter) and peeking at a live
// lane (Peek, PeekLane) take nothing and spend no attempt. Where the broker
// has a non-destructive read (broker.Browser: embedded, asynq, NATS) they
// use it, and nothing in the queue changes. Elsewhere (RabbitMQ, SQS) Ops
// leases the messages of a queue in batches, keeps them leased until it
// has what it needs (so each is seen once), then gives them back, and says
// so (ReadLease); a listing stops as soon as it has its limit (More).
//
// # Known lanes
//
// An operation naming a lane accepts only a known one (KnownLanes): an
// unknown lane is ErrUnknownLane, naming the known ones, so a typo or an
// ingestion token cannot create queues no server serves.
// Bulk operations (Replay, Move, Purge) go lane by lane and batch by batch:
// each matching dead letter is acted on as soon as it is leased, the rest
// of the lane is held (its leases renewed with broker.Broker.Extend as the
// run goes on) and given back before the next lane. Once an item's publish
// has started it runs to its end even if the caller's context is cancelled.
// While a scan holds a lane's dead letters, a concurrent scan of the same
// lane sees fewer of them (a bulk operation by IDs looks again for IDs it
// did not find); a scan holds no more than Config.MaxScan messages per lane
// at a time (Report.Truncated says when that stopped a bulk operation).

// With a ledger, every state-changing operation writes an event naming its
// Actor to the affected task's log: "replayed" and "moved" (the task goes
// from dead back to queued), "purged" (the task stays dead), and sandbox
// replays ("sandbox_replayed"). Lane pauses are kept in the ledger with who
// paused the lane and since when, and each pause and resume with its Actor
// in the lanes' history (LaneEvents).
//
// # Scope
//
// A Scope with a Tenant restricts every operation to that tenant: another
// tenant's tasks and dead letters read as ledger.ErrNotFound, are left out
// of listings, and a filter naming another tenant matches nothing.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scaling"
	"github.com/switchyard-dev/switchyard/spend"
)

// Config configures Ops.
type Config struct {
	// Broker is the namespace's broker (required).
	Broker *broker.Broker
	// Ledger is the task ledger; without it, task listings, timelines,
	// reviews, sandbox replay, ingestion status and cross-process lane pause
	// are unavailable (ErrNoLedger) and dead letters come from the broker
	// alone.
	Ledger ledger.Ledger
	// Lanes are the lanes the servers serve: shown when the broker cannot
	// list its own (broker.LaneLister), and known to every operation that
	// names a lane (KnownLanes). Defaults to the four default lanes.
	Lanes []string
	// Kinds are the task kinds ingestion accepts, each with an optional
	// validator for its JSON arguments. Enqueue refuses other kinds. Nil
	// means ingestion accepts no kind.
	Kinds map[string]KindSpec
	// Objectives are the lanes' wait objectives, reported with the lane
	// stats (OldestReady above it is "late"). Defaults to the default lanes'.
	Objectives map[string]time.Duration
	// MaxScan is the most dead letters one operation holds leased per lane
	// at a time (those it looked at and did not remove). A listing or lookup
	// by leasing that reaches it stops there and says so
	// (DeadListing.Truncated); a bulk operation stops for that lane and
	// sets Report.Truncated. Listings that browse (broker.Browser) hold
	// nothing and read to the end; a scoped peek that browses looks at most
	// MaxScan messages. Defaults to 10000.
	MaxScan int
	// Scaler computes the lanes' scaling signal (Ops.Scaling, GET
	// /api/v1/scaling). Its Broker and Ledger default to Config's, its
	// Lanes to Config.Lanes with the default lanes' definitions and
	// Objectives. Keep one per process: it measures arrival rates between
	// calls. Defaults to such a Scaler with a default Policy.
	Scaler *scaling.Scaler
	// ScanLease is the lease a scan takes on the messages it holds; the
	// leases are renewed while an operation runs, and an item whose lease
	// has run out is not acted on. Defaults to 5 minutes (capped by the
	// broker's longest lease).
	ScanLease time.Duration
	// Spend reports recorded model spend (Ops.Spend, GET /api/v1/spend,
	// the dashboard's Spend view): providerbatch/sqlstore.Store on the
	// ledger's database. Defaults to nil: the spend report is unavailable
	// (ErrNoSpend).
	Spend spend.Reporter
}

// ErrNoLedger is returned by operations that need a ledger when none is
// configured. It is switchyard.ErrNoLedger.
var ErrNoLedger = switchyard.ErrNoLedger

// KindSpec describes a task kind accepted by Enqueue.
type KindSpec struct {
	// Validate checks the JSON arguments; an error is a 400 with its text.
	// Nil accepts any JSON object.
	Validate func(args json.RawMessage) error
	// Lane is the default lane of the kind ("" = the client's default).
	Lane string
	// Lanes, when set, are the lanes a request may name for the kind
	// besides Lane; a request naming another lane is refused. Nil lets a
	// request name any lane (but never a fair lane's shard).
	Lanes []string
}

// Ops are the operator operations. They are safe for concurrent use.
type Ops struct {
	cfg    Config
	client *switchyard.Client
	now    func() time.Time // the clock leases are reckoned by (tests move it)
	sleep  func(ctx context.Context, d time.Duration) error
	keys   keyMemo // requests by idempotency key, without a ledger
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// New returns Ops over cfg. It refuses a nil broker and invalid lane or
// kind names (broker.ErrInvalid).
func New(cfg Config) (*Ops, error) {
	if cfg.Broker == nil {
		return nil, broker.Invalidf("admin: nil broker")
	}
	for _, l := range cfg.Lanes {
		if err := broker.ValidateName("lane", l); err != nil {
			return nil, fmt.Errorf("admin: Config.Lanes: %w", err)
		}
	}
	for k, spec := range cfg.Kinds {
		if err := broker.ValidateName("kind", k); err != nil {
			return nil, fmt.Errorf("admin: Config.Kinds: %w", err)
		}
		if spec.Lane != "" {
			if err := broker.ValidateName("lane", spec.Lane); err != nil {
				return nil, fmt.Errorf("admin: Config.Kinds[%q].Lane: %w", k, err)
			}
		}
		for _, l := range spec.Lanes {
			if err := broker.ValidateName("lane", l); err != nil {
				return nil, fmt.Errorf("admin: Config.Kinds[%q].Lanes: %w", k, err)
			}
		}
	}
	if len(cfg.Lanes) == 0 {
		for _, l := range lanes.Defaults() {
			cfg.Lanes = append(cfg.Lanes, l.Name)
		}
	}
	if cfg.Objectives == nil {
		cfg.Objectives = map[string]time.Duration{}
		for _, l := range lanes.Defaults() {
			if l.WaitObjective > 0 {
				cfg.Objectives[l.Name] = l.WaitObjective
			}
		}
	}
	if cfg.MaxScan <= 0 {
		cfg.MaxScan = 10000
	}
	if cfg.ScanLease <= 0 {
		cfg.ScanLease = 5 * time.Minute
	}
	cfg.Scaler = scalerFor(cfg)
	// The broker's codec seals the ledger's payloads too.
	cfg.Ledger = ledger.WithCodec(cfg.Ledger, cfg.Broker.Codec())
	c, err := switchyard.NewClient(cfg.Broker, &switchyard.ClientConfig{Ledger: cfg.Ledger})
	if err != nil {
		return nil, err
	}
	return &Ops{cfg: cfg, client: c, now: time.Now, sleep: sleepCtx}, nil
}

// Client returns the Client Ops enqueues and replays through.
func (o *Ops) Client() *switchyard.Client { return o.client }

// Scope restricts an operation to one tenant; the zero Scope sees every
// tenant. A scoped caller never sees or touches another tenant's tasks or
// dead letters: they are reported as not found.
type Scope struct {
	Tenant string
}

// allows reports whether a task or message of tenant is visible in sc.
func (sc Scope) allows(tenant string) bool { return sc.Tenant == "" || sc.Tenant == tenant }

// tenant combines a filter's tenant with the scope: ok=false when the
// filter names another tenant than the scope's (nothing matches).
func (sc Scope) tenant(filter string) (string, bool) {
	if sc.Tenant == "" {
		return filter, true
	}
	if filter != "" && filter != sc.Tenant {
		return "", false
	}
	return sc.Tenant, true
}

// Actor names who performs a state-changing operation, for the event log
// ("operator:alice", "token:ci").
type Actor string

// String returns the actor's name, "operator" when it is empty.
func (a Actor) String() string {
	if a == "" {
		return "operator"
	}
	return string(a)
}

// LaneInfo is a lane at a glance.
type LaneInfo struct {
	broker.Stats
	Paused   bool
	PausedBy string
	// PauseKnown: Paused is read from a ledger that keeps lane pauses.
	// Without one (no Config.Ledger) a lane paused by servers sharing a
	// ledger looks running here: its pause state is unknown.
	PauseKnown bool
	Objective  time.Duration
	// Late: the oldest ready task is older than the lane's objective.
	Late bool
}

// Lanes returns every lane's stats (the broker's lanes when it can list
// them, else Config.Lanes), with pause state from the ledger.
//
// The list holds Config.Lanes (the default lanes unless configured), then
// any other lane the broker lists, then any other paused lane.
func (o *Ops) Lanes(ctx context.Context) ([]LaneInfo, error) {
	names := slices.Clone(o.cfg.Lanes)
	found, ok, err := o.cfg.Broker.Lanes(ctx)
	if err != nil {
		return nil, err
	}
	if ok {
		for _, f := range found {
			if !slices.Contains(names, f) {
				names = append(names, f)
			}
		}
	}
	paused, known, err := o.pausedLanes(ctx)
	if err != nil {
		return nil, err
	}
	for l := range paused {
		if !slices.Contains(names, l) {
			names = append(names, l)
		}
	}
	out := make([]LaneInfo, 0, len(names))
	for _, l := range names {
		s, err := o.cfg.Broker.Stats(ctx, l)
		if err != nil {
			return nil, err
		}
		li := LaneInfo{Stats: s, Objective: o.cfg.Objectives[l], PauseKnown: known}
		if p, ok := paused[l]; ok {
			li.Paused, li.PausedBy = true, p
		}
		li.Late = li.Objective > 0 && s.OldestReady > li.Objective
		out = append(out, li)
	}
	return out, nil
}

// deadLanes are the lanes a dead-letter scan over "every lane" covers: the
// broker's own list when it can tell, else Config.Lanes.
func (o *Ops) deadLanes(ctx context.Context, lane string) ([]string, error) {
	if lane != "" {
		if err := broker.ValidateName("lane", lane); err != nil {
			return nil, err
		}
		return []string{lane}, nil
	}
	found, ok, err := o.cfg.Broker.Lanes(ctx)
	if err != nil {
		return nil, err
	}
	if ok {
		return found, nil
	}
	return o.cfg.Lanes, nil
}

// TaskFilter selects tasks.
type TaskFilter struct {
	States []ledger.State
	Kind   string
	Lane   string
	Tenant string // combined with Scope: a scoped caller's tenant wins
	Limit  int    // default 50, at most 1000
	After  string // the previous page's Next
}

// TaskPage is one page of tasks, oldest first; Next is "" on the last page.
type TaskPage struct {
	Tasks []*ledger.Task
	Next  string
}

// Tasks lists tasks from the ledger. Unknown states, bad kind or lane names
// and a negative limit are refused with broker.ErrInvalid; a filter naming
// another tenant than the scope's returns an empty page. A cursor (After)
// naming no task is ledger.ErrNotFound; for a scoped caller, so is one
// naming another tenant's task, with the same error.
func (o *Ops) Tasks(ctx context.Context, sc Scope, f TaskFilter) (*TaskPage, error) {
	if o.cfg.Ledger == nil {
		return nil, ErrNoLedger
	}
	for _, s := range f.States {
		if !s.Valid() {
			return nil, broker.Invalidf("admin: unknown task state %q (want one of %s)", s, stateNames())
		}
	}
	if f.Kind != "" {
		if err := broker.ValidateName("kind", f.Kind); err != nil {
			return nil, err
		}
	}
	if f.Lane != "" {
		if err := broker.ValidateName("lane", f.Lane); err != nil {
			return nil, err
		}
	}
	if f.Limit < 0 {
		return nil, broker.Invalidf("admin: negative limit %d", f.Limit)
	}
	limit := f.Limit
	if limit == 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	tenant, ok := sc.tenant(f.Tenant)
	if !ok {
		return &TaskPage{Tasks: []*ledger.Task{}}, nil
	}
	if sc.Tenant != "" && f.After != "" {
		// A cursor naming another tenant's task reads as one naming no
		// task: the same error, so that a scoped caller cannot tell
		// another tenant's task IDs from missing ones.
		if t, err := o.cfg.Ledger.Get(ctx, f.After); errors.Is(err, ledger.ErrNotFound) || err == nil && !sc.allows(t.Tenant) {
			return nil, cursorNotFound(f.After)
		} else if err != nil {
			return nil, err
		}
	}
	// One more than asked, to know whether there is a next page (the
	// ledger's cap of 1000 allowing).
	ts, err := o.cfg.Ledger.List(ctx, ledger.Filter{Tenant: tenant, States: f.States, Kind: f.Kind, Lane: f.Lane, Limit: min(limit+1, 1000), After: f.After})
	if err != nil {
		if sc.Tenant != "" && errors.Is(err, ledger.ErrNotFound) {
			return nil, cursorNotFound(f.After) // pruned since
		}
		return nil, err
	}
	page := &TaskPage{Tasks: ts}
	if ts == nil {
		page.Tasks = []*ledger.Task{}
	}
	switch {
	case len(ts) > limit:
		page.Tasks = ts[:limit]
		page.Next = ts[limit-1].ID
	case len(ts) == limit && limit == 1000:
		page.Next = ts[limit-1].ID // perhaps more: the next page tells
	}
	return page, nil
}

// cursorNotFound is the error for a page cursor that names no task the
// caller may see.
func cursorNotFound(after string) error {
	return fmt.Errorf("admin: page cursor %q: no such task (pruned?): %w", after, ledger.ErrNotFound)
}

// States lists the task states in their usual order.
func States() []ledger.State {
	return []ledger.State{ledger.Queued, ledger.Running, ledger.RetryWait, ledger.AwaitingReview, ledger.AwaitingEvent, ledger.Completed,
		ledger.Failed, ledger.Dead, ledger.Rejected, ledger.Cancelled}
}

func stateNames() string {
	s := ""
	for i, st := range States() {
		if i > 0 {
			s += ", "
		}
		s += string(st)
	}
	return s
}

// Task returns a task with its attempts, event log (the timeline) and
// effects; ledger.ErrNotFound when it does not exist or is out of scope.
func (o *Ops) Task(ctx context.Context, sc Scope, id string) (*switchyard.TaskInfo, error) {
	if o.cfg.Ledger == nil {
		return nil, ErrNoLedger
	}
	if _, err := o.scopedTask(ctx, sc, id); err != nil {
		return nil, err
	}
	return o.client.Task(ctx, id)
}

// scopedTask returns the ledger's task id, or ledger.ErrNotFound when it is
// out of sc.
func (o *Ops) scopedTask(ctx context.Context, sc Scope, id string) (*ledger.Task, error) {
	if id == "" {
		return nil, broker.Invalidf("admin: empty task id")
	}
	t, err := o.cfg.Ledger.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !sc.allows(t.Tenant) {
		return nil, fmt.Errorf("task %s: %w", id, ledger.ErrNotFound)
	}
	return t, nil
}

// Reviews, Approve, Reject and Claim wrap the Client's review queue with
// scope checks.
func (o *Ops) Reviews(ctx context.Context, sc Scope, limit int) ([]*switchyard.ReviewItem, error) {
	if o.cfg.Ledger == nil {
		return nil, ErrNoLedger
	}
	if limit < 0 {
		return nil, broker.Invalidf("admin: negative limit %d", limit)
	}
	items, err := o.client.Reviews(ctx, switchyard.ReviewFilter{Tenant: sc.Tenant, Limit: limit})
	if items == nil && err == nil {
		items = []*switchyard.ReviewItem{}
	}
	return items, err
}

// Claim marks the review of task id as taken by who.
func (o *Ops) Claim(ctx context.Context, sc Scope, id string, who Actor) error {
	if err := o.reviewScope(ctx, sc, id); err != nil {
		return err
	}
	return o.client.Claim(ctx, id, who.String())
}

// Approve resumes task id, awaiting review, in its lane with who's note.
func (o *Ops) Approve(ctx context.Context, sc Scope, id string, who Actor, note string) error {
	if err := o.reviewScope(ctx, sc, id); err != nil {
		return err
	}
	return o.client.Approve(ctx, id, who.String(), note)
}

// Reject ends task id, awaiting review, with who's reason.
func (o *Ops) Reject(ctx context.Context, sc Scope, id string, who Actor, reason string) error {
	if err := o.reviewScope(ctx, sc, id); err != nil {
		return err
	}
	return o.client.Reject(ctx, id, who.String(), reason)
}

func (o *Ops) reviewScope(ctx context.Context, sc Scope, id string) error {
	if o.cfg.Ledger == nil {
		return ErrNoLedger
	}
	_, err := o.scopedTask(ctx, sc, id)
	return err
}

// Ready reports whether the broker and the ledger answer (readyz): the
// stats of one lane, and a ledger lookup, each within 3 seconds.
func (o *Ops) Ready(ctx context.Context) error {
	bctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := o.cfg.Broker.Stats(bctx, o.cfg.Lanes[0]); err != nil {
		return fmt.Errorf("admin: broker not ready: %w", err)
	}
	if o.cfg.Ledger != nil {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if _, err := o.cfg.Ledger.Get(lctx, "readyz-probe"); err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("admin: ledger not ready: %w", err)
		}
	}
	return nil
}
