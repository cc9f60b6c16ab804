package scheduler

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Durable waits. A handler calls AwaitEvent(ctx, name, timeout): when the
// event has arrived (a signal stored it in the ledger) it gets the
// payload; otherwise AwaitEvent returns an error that, returned by the
// handler, parks the task in state awaiting_event. The delivery is
// acknowledged and the slot freed: no process holds the task while it
// waits. A signal (switchyard's Client.Signal, or the HTTP callback with
// the wait's one-time token) stores the payload and publishes the task
// again; the handler runs from the top, its Steps memoised, and this time
// AwaitEvent returns the payload. The timeout is a delayed message on the
// task's lane (HeaderAwaitTimeout), so it holds across restarts on every
// broker: when it comes first, the task ends failed with reason
// await_timeout.

// HeaderAwaitTimeout marks the delayed message that ends a wait on its
// timeout; its value is JSON {"task": id, "name": wait name}. The message
// has an ID of its own and never runs a handler.
const HeaderAwaitTimeout = "switchyard-await-timeout"

// ErrAwaitTimedOut is returned by AwaitEvent for a wait whose timeout has
// passed (a task replayed after it failed so).
var ErrAwaitTimedOut = errors.New("scheduler: the event did not arrive before the wait's timeout")

// MaxAwaitTimeout is the longest wait AwaitEvent accepts.
const MaxAwaitTimeout = 365 * 24 * time.Hour

// AwaitEvent returns the payload of event name of the running task once a
// signal delivered it. Until then it records the wait (with
// correlationKey, when not empty, so a signal can find it by that key)
// and returns an error the handler must return: the task then parks until
// the signal, or until timeout passes and it fails with reason
// await_timeout. Each name is one event per task (like a Step name).
func AwaitEvent(ctx context.Context, name string, timeout time.Duration, correlationKey string) ([]byte, error) {
	rs := stateOf(ctx)
	if rs == nil {
		return nil, ErrNotInTask
	}
	w, err := rs.wait(ctx, name, timeout, correlationKey, nil)
	if err != nil {
		return nil, err
	}
	switch w.State {
	case ledger.WaitSignalled:
		if w.Payload == nil {
			return []byte{}, nil
		}
		return w.Payload, nil
	case ledger.WaitTimedOut:
		return nil, Permanent(fmt.Errorf("event %s: %w", name, ErrAwaitTimedOut))
	}
	return nil, &resultError{kind: resultAwaitEvent, reason: name, delay: timeout, err: fmt.Errorf("awaiting event %s", name)}
}

// EventToken returns the one-time token that signals event name of the
// running task over HTTP (the admin API's signal callback), recording the
// wait as AwaitEvent does. Call it before AwaitEvent and hand the token to
// whoever will call back (inside an Effect, so it is sent once); it is the
// same token on every attempt. The ledger keeps its SHA-256 only (and the
// token itself as a memoised step, sealed when the broker has a codec).
func EventToken(ctx context.Context, name string, timeout time.Duration, correlationKey string) (string, error) {
	rs := stateOf(ctx)
	if rs == nil {
		return "", ErrNotInTask
	}
	if rs.s.cfg.Ledger == nil {
		return "", Permanent(errors.New("EventToken needs a ledger"))
	}
	out, err := Step(ctx, "switchyard/event-token/"+name, func(context.Context) ([]byte, error) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		return []byte(base64.RawURLEncoding.EncodeToString(b)), nil
	})
	if err != nil {
		return "", err
	}
	tok := string(out)
	h := TokenHash(tok)
	w, err := rs.wait(ctx, name, timeout, correlationKey, h)
	if err != nil {
		return "", err
	}
	if w.TokenHash == nil {
		return "", Permanent(fmt.Errorf("event %s: the wait was recorded without a token: call EventToken before AwaitEvent", name))
	}
	return tok, nil
}

// TokenHash is the SHA-256 of a signal token, as the ledger keeps it.
func TokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func (rs *runState) wait(ctx context.Context, name string, timeout time.Duration, key string, tokenHash []byte) (ledger.Wait, error) {
	L := rs.s.cfg.Ledger
	if L == nil {
		return ledger.Wait{}, Permanent(errors.New("AwaitEvent needs a ledger to park the task"))
	}
	if timeout <= 0 || timeout > MaxAwaitTimeout {
		return ledger.Wait{}, Permanent(broker.Invalidf("event %s: timeout %v is outside (0, %v]", name, timeout, MaxAwaitTimeout))
	}
	w, _, err := L.PutWait(ctx, ledger.Wait{TaskID: rs.task, Name: name, Tenant: rs.tenant, CorrelationKey: key, TokenHash: tokenHash, Timeout: timeout})
	if err != nil {
		if errors.Is(err, broker.ErrInvalid) || errors.Is(err, ledger.ErrConflict) {
			return ledger.Wait{}, Permanent(fmt.Errorf("event %s: %w", name, err))
		}
		return ledger.Wait{}, fmt.Errorf("event %s: %w", name, err)
	}
	return w, nil
}

// awaitTimeoutMsg is HeaderAwaitTimeout's value.
type awaitTimeoutMsg struct {
	Task string `json:"task"`
	Name string `json:"name"`
}

// parkForEvent settles a handler that returned AwaitEvent's error: the
// timeout message is published first (a park without one could wait for
// ever), then the task moves to awaiting_event and the delivery is
// acknowledged. A signal that arrived meanwhile resumes it at once.
func (s *Scheduler) parkForEvent(ctx context.Context, d *broker.Delivery, att ledger.Attempt, out outcome, dur time.Duration) {
	L := s.cfg.Ledger
	att.Outcome = "await_event"
	name, lane := out.reason, d.Lane
	w, err := L.GetWait(ctx, d.ID, name)
	if err == nil && w.State == ledger.WaitSignalled {
		// The event is here already: run again now, without spending an
		// attempt.
		s.end(ctx, att, ledger.Queued, "event_received", name, nil, nil, time.Time{})
		s.settleErr(d, "release", s.b.Release(ctx, d, 0))
		return
	}
	if err == nil {
		hdr, _ := json.Marshal(awaitTimeoutMsg{Task: d.ID, Name: name})
		_, err = s.b.PublishOne(ctx, &broker.Message{ID: broker.NewID(), Lane: lane, Kind: d.Kind, Tenant: d.Tenant,
			RunAt: s.cfg.Now().Add(out.delay), Headers: map[string]string{HeaderAwaitTimeout: string(hdr)}})
	}
	if err != nil {
		// Retry the handler later; it calls AwaitEvent again.
		msg := "parking for event " + name + ": " + err.Error()
		att.Outcome, att.Error = "retry", msg
		s.end(ctx, att, ledger.RetryWait, "retry", msg, nil, &msg, s.cfg.Now().Add(time.Second))
		s.settleErr(d, "nack", s.b.Nack(ctx, d, time.Second))
		return
	}
	detail, _ := json.Marshal(map[string]string{"event": name, "timeout": out.delay.String()})
	if !s.end(ctx, att, ledger.AwaitingEvent, "await_event", string(detail), nil, nil, time.Time{}) {
		return
	}
	s.settleErr(d, "ack", s.b.Ack(ctx, d))
	s.observe(Event{Type: EventAwaitingEvent, TaskID: d.ID, Kind: d.Kind, Lane: lane, Attempt: att.Number, Duration: dur})
	// A signal or the timeout that came while the task was still running
	// found it not yet parked and left the move to us.
	if w, err := L.GetWait(ctx, d.ID, name); err == nil {
		s.settleWait(ctx, d.ID, w)
	}
}

// EventAwaitingEvent: a task parked for an event (AwaitEvent).
const EventAwaitingEvent EventType = "awaiting_event"

// settleWait moves a parked task on when its wait is closed: a signalled
// wait resumes it (published again), a timed-out one fails it. Either move
// is guarded (from awaiting_event), so of the signaller, the timeout and
// the parker exactly one makes it.
func (s *Scheduler) settleWait(ctx context.Context, taskID string, w ledger.Wait) {
	switch w.State {
	case ledger.WaitSignalled:
		if err := ResumeAfterEvent(ctx, s.cfg.Ledger, s.b, taskID, w.Name, s.cfg.WorkerID); err != nil && !errors.Is(err, ledger.ErrConflict) {
			s.cfg.Logger.Warn("switchyard: resuming a signalled task failed; its timeout message retries", "task", taskID, "error", err)
		}
	case ledger.WaitTimedOut:
		msg := fmt.Sprintf("event %s did not arrive within %s", w.Name, w.Timeout)
		_, err := s.cfg.Ledger.Transition(ctx, ledger.TransitionRequest{ID: taskID, From: []ledger.State{ledger.AwaitingEvent}, To: ledger.Failed,
			Reason: "await_timeout", Detail: msg, Actor: s.cfg.WorkerID, LastError: &msg})
		if err != nil && !errors.Is(err, ledger.ErrConflict) {
			s.cfg.Logger.Warn("switchyard: failing a timed-out wait failed", "task", taskID, "error", err)
		}
	}
}

// awaitTimeout handles a wait's timeout message: the wait times out unless
// it was signalled first, and a parked task moves on. It never runs a
// handler.
func (s *Scheduler) awaitTimeout(ctx context.Context, d *broker.Delivery) {
	L := s.cfg.Ledger
	var m awaitTimeoutMsg
	if L == nil || json.Unmarshal([]byte(d.Headers[HeaderAwaitTimeout]), &m) != nil || m.Task == "" || m.Name == "" {
		s.deadLetter(ctx, d, nil, broker.ReasonUndecodable, "a wait's timeout message that does not decode, or no ledger to apply it")
		return
	}
	w, err := L.ExpireWait(ctx, m.Task, m.Name)
	switch {
	case err == nil, errors.Is(err, ledger.ErrConflict):
		if errors.Is(err, ledger.ErrConflict) {
			// Signalled first (or expired by an earlier copy): a task still
			// parked with a signalled wait is resumed here (its signaller
			// could not publish it).
			if w, err = L.GetWait(ctx, m.Task, m.Name); err != nil {
				s.ledgerDown(ctx, d, err)
				return
			}
		}
		s.settleWait(ctx, m.Task, w)
		s.settleErr(d, "ack", s.b.Ack(ctx, d))
	case errors.Is(err, ledger.ErrNotFound) || refused(err):
		s.settleErr(d, "ack", s.b.Ack(ctx, d)) // the task was pruned
	default:
		s.ledgerDown(ctx, d, err)
	}
}

// ResumeAfterEvent publishes a task parked in awaiting_event again after
// its wait named `name` was signalled: the ledger move (awaiting_event →
// queued, reason event_received) comes first and guards the publish, so
// one resume happens however many try; when the publish fails the task
// goes back to awaiting_event and the error is returned (its timeout
// message resumes it then, or a later try). ErrConflict: the task is not
// parked (still running: its worker resumes it; or already resumed).
//
// The resumed run is a new attempt in the ledger (its number one past the
// parked one's) with a fresh retry budget on the broker: waiting is not
// failing, so a task may wait for more events than it has attempts.
func ResumeAfterEvent(ctx context.Context, L ledger.Ledger, b *broker.Broker, taskID, name, actor string) error {
	cur, err := L.Get(ctx, taskID)
	if err != nil {
		return err
	}
	t, err := L.Transition(ctx, ledger.TransitionRequest{ID: taskID, From: []ledger.State{ledger.AwaitingEvent}, To: ledger.Queued,
		Reason: "event_received", Detail: name, Actor: actor, Attempt: cur.Attempt + 1, IfAttemptBelow: cur.Attempt + 1})
	if err != nil {
		return err
	}
	m := &broker.Message{ID: t.ID, Lane: t.Lane, Kind: t.Kind, Body: t.Args, Tenant: t.Tenant, OrderingKey: t.OrderingKey,
		MaxAttempts: t.MaxAttempts, Headers: map[string]string{}}
	for k, v := range t.Metadata {
		m.Headers["meta-"+k] = v
	}
	if !t.Deadline.IsZero() {
		m.Headers[HeaderDeadline] = t.Deadline.UTC().Format(time.RFC3339Nano)
	}
	if t.Metadata[MetaSandboxOf] != "" {
		m.Headers[HeaderSandbox] = t.Metadata[MetaSandboxOf]
	}
	if _, err := b.PublishOne(ctx, m); err != nil {
		_, _ = L.Transition(context.WithoutCancel(ctx), ledger.TransitionRequest{ID: taskID, From: []ledger.State{ledger.Queued},
			To: ledger.AwaitingEvent, Reason: "resume_not_published", Detail: err.Error(), Actor: actor})
		return err
	}
	return nil
}
