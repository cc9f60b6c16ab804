// Package store holds what the ledger's SQL stores share: input
// validation, error constructors, filter defaults and the migration file
// loader. It is internal: the stores' behaviour is specified by the
// ledger.Ledger contract and checked by ledger/ledgertest.
package store

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// DefaultDedupWindow is the dedup claim window when the DSN gives none.
const DefaultDedupWindow = 24 * time.Hour

// Defaults applies the option defaults the stores share — the dedup
// window (DefaultDedupWindow), the ordering stall (SeqStall) and the
// clock (time.Now) — and refuses negative durations.
func Defaults(op string, dedupWindow, orderingStall *time.Duration, now *func() time.Time) error {
	if *dedupWindow == 0 {
		*dedupWindow = DefaultDedupWindow
	}
	if *dedupWindow < 0 {
		return Invalid(op, "dedup window %v is negative", *dedupWindow)
	}
	if *orderingStall == 0 {
		*orderingStall = SeqStall
	}
	if *orderingStall < 0 {
		return Invalid(op, "ordering stall %v is negative", *orderingStall)
	}
	if *now == nil {
		*now = time.Now
	}
	return nil
}

// NotFound returns a permanent error matching ledger.ErrNotFound.
func NotFound(op, format string, args ...any) error {
	return &broker.Error{Op: op, Class: broker.Permanent, Kind: ledger.ErrNotFound,
		Err: fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ledger.ErrNotFound)}
}

// Conflict returns a permanent error matching ledger.ErrConflict whose
// chain holds a *ledger.ConflictError.
func Conflict(op, id string, cur, to ledger.State) error {
	return &broker.Error{Op: op, Class: broker.Permanent, Kind: ledger.ErrConflict,
		Err: &ledger.ConflictError{ID: id, Current: cur, To: to}}
}

// Conflictf returns a permanent error matching ledger.ErrConflict for
// conflicts other than task transitions (a confirmed effect).
func Conflictf(op, format string, args ...any) error {
	return &broker.Error{Op: op, Class: broker.Permanent, Kind: ledger.ErrConflict,
		Err: fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ledger.ErrConflict)}
}

// Invalid returns a permanent broker.ErrInvalid error for op.
func Invalid(op, format string, args ...any) error {
	return &broker.Error{Op: op, Class: broker.Permanent, Kind: broker.ErrInvalid, Err: fmt.Errorf(format, args...)}
}

// Closed returns the error of a call on a closed store.
func Closed(op string) error {
	return &broker.Error{Op: op, Class: broker.Permanent, Kind: broker.ErrClosed, Err: errors.New("ledger closed")}
}

// ID checks a task ID argument.
func ID(op, id string) error {
	if id == "" {
		return Invalid(op, "task id is empty")
	}
	return key(op, "task id", id)
}

// Key checks a non-empty key argument (step name, effect key).
func Key(op, what, s string) error {
	if s == "" {
		return Invalid(op, "%s is empty", what)
	}
	return key(op, what, s)
}

func key(op, what, s string) error {
	if len(s) > broker.MaxKeyLen {
		return Invalid(op, "%s is %d bytes, the limit is %d", what, len(s), broker.MaxKeyLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return Invalid(op, "%s contains a control character", what)
		}
	}
	return nil
}

// Reason checks a reason code: 1–128 characters of [A-Za-z0-9_.:-].
func Reason(op, r string) error {
	if err := broker.ValidateName("reason", r); err != nil {
		return broker.Wrap(op, broker.Permanent, err)
	}
	return nil
}

// CreateTask validates t for Create and returns the copy to insert, with
// its ID assigned, state queued and timestamps set to now.
func CreateTask(op string, t *ledger.Task, now time.Time) (*ledger.Task, error) {
	if t == nil {
		return nil, Invalid(op, "nil task")
	}
	if err := t.Validate(); err != nil {
		return nil, broker.Wrap(op, broker.Permanent, err)
	}
	if t.State != "" && t.State != ledger.Queued {
		return nil, Invalid(op, "a new task is created queued, not %q", t.State)
	}
	if t.Attempt < 0 {
		return nil, Invalid(op, "attempt %d is negative", t.Attempt)
	}
	// Times are stored as int64 Unix nanoseconds: refuse what would wrap.
	for _, f := range [...]struct {
		what string
		t    time.Time
	}{{"run-at", t.RunAt}, {"deadline", t.Deadline}} {
		if err := broker.ValidateTime(f.what, f.t); err != nil {
			return nil, broker.Wrap(op, broker.Permanent, err)
		}
	}
	if t.MaxAttempts > broker.MaxAttemptsLimit {
		return nil, Invalid(op, "max attempts %d is above %d", t.MaxAttempts, broker.MaxAttemptsLimit)
	}
	c := *t
	if c.ID == "" {
		c.ID = broker.NewID()
	}
	c.State = ledger.Queued
	c.CreatedAt, c.UpdatedAt = now, now
	return &c, nil
}

// Transition validates req and returns the states the task may be in for
// the move to happen: req.From (or every state) restricted to the legal
// predecessors of req.To.
func Transition(op string, req *ledger.TransitionRequest) ([]ledger.State, error) {
	if err := ID(op, req.ID); err != nil {
		return nil, err
	}
	if !req.To.Valid() {
		return nil, Invalid(op, "unknown target state %q", req.To)
	}
	if err := Reason(op, req.Reason); err != nil {
		return nil, err
	}
	if req.Attempt < 0 {
		return nil, Invalid(op, "attempt %d is negative", req.Attempt)
	}
	if req.Lane != "" {
		if err := broker.ValidateName("lane", req.Lane); err != nil {
			return nil, Invalid(op, "%v", err)
		}
	}
	if req.IfAttemptBelow < 0 {
		return nil, Invalid(op, "IfAttemptBelow %d is negative", req.IfAttemptBelow)
	}
	for _, s := range req.From {
		if !s.Valid() {
			return nil, Invalid(op, "unknown source state %q", s)
		}
	}
	var from []ledger.State
	for _, s := range AllStates {
		if !ledger.CanTransition(s, req.To) {
			continue
		}
		if len(req.From) > 0 && !contains(req.From, s) {
			continue
		}
		from = append(from, s)
	}
	return from, nil
}

// AttemptGuard reports whether a task at attempt passes req's
// IfAttemptBelow guard.
func AttemptGuard(req *ledger.TransitionRequest, attempt int) bool {
	return req.IfAttemptBelow <= 0 || attempt < req.IfAttemptBelow
}

// AllStates lists every state in a fixed order.
var AllStates = []ledger.State{
	ledger.Queued, ledger.Running, ledger.RetryWait, ledger.Completed, ledger.Failed,
	ledger.Dead, ledger.AwaitingReview, ledger.Rejected, ledger.Cancelled, ledger.AwaitingEvent,
}

// TerminalStates lists the terminal states.
func TerminalStates() []ledger.State {
	var out []ledger.State
	for _, s := range AllStates {
		if s.Terminal() {
			out = append(out, s)
		}
	}
	return out
}

func contains(ss []ledger.State, s ledger.State) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Filter validates f and applies the defaults (limit 100, at most 1000).
func Filter(op string, f ledger.Filter) (ledger.Filter, error) {
	for _, s := range f.States {
		if !s.Valid() {
			return f, Invalid(op, "unknown state %q in filter", s)
		}
	}
	if f.Limit < 0 {
		return f, Invalid(op, "limit %d is negative", f.Limit)
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit > 1000 {
		f.Limit = 1000
	}
	return f, nil
}

// Attempt validates an attempt record.
func Attempt(op string, a *ledger.Attempt) error {
	if err := ID(op, a.TaskID); err != nil {
		return err
	}
	if a.Number < 1 {
		return Invalid(op, "attempt number %d is below 1", a.Number)
	}
	if a.Duration < 0 {
		return Invalid(op, "attempt duration %v is negative", a.Duration)
	}
	return nil
}

// Event validates an event for AppendEvent.
func Event(op string, e *ledger.Event) error {
	if err := ID(op, e.TaskID); err != nil {
		return err
	}
	if err := Reason(op, e.Reason); err != nil {
		return err
	}
	if e.From != "" && !e.From.Valid() {
		return Invalid(op, "unknown state %q", e.From)
	}
	if e.To != "" && !e.To.Valid() {
		return Invalid(op, "unknown state %q", e.To)
	}
	return nil
}

// EffectState validates an outcome for SetEffect.
func EffectState(op string, s ledger.EffectState) error {
	switch s {
	case ledger.EffectPending, ledger.EffectConfirmed, ledger.EffectUnknown, ledger.EffectFailed, ledger.EffectWouldDo:
		return nil
	}
	return Invalid(op, "unknown effect state %q", s)
}

// LanePause validates SetLanePaused's arguments.
func LanePause(op, lane, actor string) error {
	if err := broker.ValidateName("lane", lane); err != nil {
		return broker.Wrap(op, broker.Permanent, err)
	}
	return keyAllowEmpty(op, "actor", actor)
}

// LaneEvents validates LaneEvents' arguments ("" is every lane) and
// returns the limit with its default (100) and maximum (1000) applied.
func LaneEvents(op, lane string, limit int) (int, error) {
	if lane != "" {
		if err := broker.ValidateName("lane", lane); err != nil {
			return 0, broker.Wrap(op, broker.Permanent, err)
		}
	}
	switch {
	case limit < 0:
		return 0, Invalid(op, "limit %d is negative", limit)
	case limit == 0:
		return 100, nil
	case limit > 1000:
		return 1000, nil
	}
	return limit, nil
}

// Dedup validates a dedup claim's arguments.
func Dedup(op, lane, tenant, key, id string) error {
	if err := broker.ValidateName("lane", lane); err != nil {
		return broker.Wrap(op, broker.Permanent, err)
	}
	if err := Key(op, "idempotency key", key); err != nil {
		return err
	}
	if err := ID(op, id); err != nil {
		return err
	}
	return keyAllowEmpty(op, "tenant", tenant)
}

func keyAllowEmpty(op, what, s string) error {
	if s == "" {
		return nil
	}
	return key(op, what, s)
}

// Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations reads dir of fsys: files named NNNN_name.sql, applied in
// version order. Versions must be unique; they may have gaps (features
// developed side by side take their numbers in advance), and a store
// applies every version it has not recorded yet (Pending), so a gap
// filled later is applied then.
func Migrations(fsys fs.FS, dir string) ([]Migration, error) {
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(n, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration file %q is not named NNNN_name.sql", n)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, n))
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: n, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", ms[i-1].Name, ms[i].Name, ms[i].Version)
		}
	}
	return ms, nil
}

// Pending returns the migrations of ms whose versions are not in applied,
// in order, or an error naming a version in applied that ms lacks (the
// database was migrated by a newer program).
func Pending(ms []Migration, applied []int) ([]Migration, error) {
	known := map[int]bool{}
	for _, m := range ms {
		known[m.Version] = true
	}
	done := map[int]bool{}
	for _, v := range applied {
		if !known[v] {
			last := 0
			if len(ms) > 0 {
				last = ms[len(ms)-1].Version
			}
			return nil, fmt.Errorf("ledger schema version %d is newer than this program's %d: upgrade the program", v, last)
		}
		done[v] = true
	}
	var out []Migration
	for _, m := range ms {
		if !done[m.Version] {
			out = append(out, m)
		}
	}
	return out, nil
}
