package asynq

import (
	"context"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// deadLetterMissing archives a task id that was pending without a task hash
// or without its msg field (deleted or written behind the framework's
// back), with ReasonUndecodable and a placeholder message naming the id so
// that asynq's tools can list it. It reports whether the dead letter was
// written.
func (d *Driver) deadLetterMissing(ctx context.Context, k *keys, id, tok string) bool {
	cause := fmt.Sprintf("%v: task %q was pending without a task hash or without its msg field (deleted or written behind Switchyard's back)", broker.ErrUndecodable, id)
	d.log.Warn("asynq: dead-lettering a pending task id without a task message", "queue", k.name, "id", id)
	dl := &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: cause, At: time.Now().UTC()}
	placeholder := (&taskMessage{Type: missingKind, ID: id, Queue: k.name}).encode()
	lost, err := d.archive(ctx, k, id, tok, string(placeholder), dl)
	if err != nil {
		d.log.Warn("could not dead-letter a task without a task message; it will be retried after its lease", "queue", k.name, "id", id, "err", err)
		return true // still leased: tried again when the lease ends
	}
	return !lost
}

// missingKind is the kind of the placeholder message of a dead letter whose
// task message was missing.
const missingKind = "switchyard.missing-task-message"

// deadLetterUndecodable archives a task whose stored message cannot be
// decoded, keeping the bytes as they are. A failure leaves the task leased;
// it comes back after the lease and is tried again.
func (d *Driver) deadLetterUndecodable(ctx context.Context, k *keys, id, tok string, cause error) {
	dl := &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: cause.Error(), At: time.Now().UTC()}
	if _, err := d.archive(ctx, k, id, tok, "", dl); err != nil {
		d.log.Warn("could not dead-letter an undecodable task; it will be retried after its lease", "queue", k.name, "id", id, "err", err)
	}
}

// archive runs the dead-letter script; lost reports a lease that passed on.
func (d *Driver) archive(ctx context.Context, k *keys, id, tok, msg string, dl *broker.DeadLetter) (lost bool, err error) {
	rec, err := broker.EncodeDeadLetter(dl)
	if err != nil {
		return false, broker.Wrap("dead-letter", broker.Permanent, err)
	}
	now := time.Now()
	cutoff := ""
	if d.cfg.ArchiveMaxAge > 0 {
		cutoff = score(now.Add(-d.cfg.ArchiveMaxAge))
	}
	out, err := deadLetterScript.Run(ctx, d.rdb,
		[]string{k.active, k.lease, k.archived, k.olock, k.daily(k.processed, now), k.daily(k.failed, now), k.processed, k.failed},
		k.task, id, tok, msg, rec, score(now), now.Add(statsTTL).Unix(), d.cfg.ArchiveMaxSize, cutoff).Slice()
	if err != nil {
		return false, classify("dead-letter", err, false)
	}
	if len(out) == 0 {
		return false, broker.Errorf("dead-letter", broker.Permanent, "dead-letter script returned nothing")
	}
	if ok, _ := out[0].(int64); ok != 1 {
		return true, nil
	}
	if len(out) > 1 {
		ids := make([]string, 0, len(out)-1)
		for _, v := range out[1:] {
			s, _ := v.(string)
			ids = append(ids, s)
		}
		d.log.Warn("dead letters deleted by the configured archive caps", "queue", k.name, "count", len(ids), "ids", ids,
			"archive_max_size", d.cfg.ArchiveMaxSize, "archive_max_age", d.cfg.ArchiveMaxAge)
	}
	return false, nil
}

// receiveDead leases dead letters from the queue's archive.
func (d *Driver) receiveDead(ctx context.Context, k *keys, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	now := time.Now()
	leaseEnd := time.UnixMilli(now.Add(req.Lease).UnixMilli())
	scan := min(req.Max*4+100, 5000)
	out, err := deadReceiveScript.Run(ctx, d.rdb, []string{k.archived, k.dlease},
		k.task, score(now), score(leaseEnd), req.Max, scan).Slice()
	if err != nil {
		return nil, classify("receive", err, false)
	}
	ds := make([]*broker.Delivery, 0, len(out)/4)
	for i := 0; i+3 < len(out); i += 4 {
		id, _ := out[i].(string)
		raw, _ := out[i+1].(string)
		rec, _ := out[i+2].(string)
		tok, _ := out[i+3].(string)
		dv, tm := deadDelivery(id, raw, rec, req.Lane)
		dv.LeaseDeadline = leaseEnd
		h := &handle{k: k, id: id, tok: tok, dead: true, tm: tm}
		dv.Handle = h
		ds = append(ds, dv)
	}
	return ds, nil
}

// deadDelivery decodes an archived task (its stored msg and dead-letter
// record) into a delivery without a handle; tm is nil when the message is
// undecodable (its bytes are then the body).
func deadDelivery(id, raw, rec, lane string) (*broker.Delivery, *taskMessage) {
	dv := &broker.Delivery{}
	tm, err := decodeTaskMessage([]byte(raw))
	var m *broker.Message
	if err == nil {
		m, err = fromTask(tm, id, lane)
	}
	var ok *taskMessage
	if err == nil {
		ok = tm
		dv.Message = *m
		dv.Attempt = int(tm.Retried) + 1
	} else {
		// Undecodable: hand back the stored bytes as the body.
		dv.Message = broker.Message{ID: id, Lane: lane, Body: []byte(raw)}
		dv.Attempt = 1
	}
	if rec != "" {
		if dl, err := broker.DecodeDeadLetter([]byte(rec)); err == nil {
			dv.DeadLetter = dl
		}
	}
	if dv.DeadLetter == nil {
		// Archived by asynq itself (retries exhausted, SkipRetry, the
		// Inspector): rebuild what it recorded.
		dv.DeadLetter = &broker.DeadLetter{Reason: broker.ReasonPermanent}
		if tm != nil {
			dv.DeadLetter.Error = tm.ErrorMsg
			if tm.LastFailedAt > 0 {
				dv.DeadLetter.At = time.Unix(tm.LastFailedAt, 0).UTC()
			}
			if tm.Retried >= tm.Retry {
				dv.DeadLetter.Reason = broker.ReasonMaxAttempts
			}
		}
	}
	return dv, ok
}

func (d *Driver) deadOp(ctx context.Context, op string, k *keys, msg, arg string, hs []*handle) ([]string, error) {
	argv := []any{k.task, op, time.Now().UnixNano(), msg, arg}
	for _, h := range hs {
		argv = append(argv, h.id, h.tok)
	}
	lost, err := deadOpScript.Run(ctx, d.rdb, []string{k.archived, k.dlease, k.pending, k.notify}, argv...).StringSlice()
	if err != nil {
		return nil, classify(op, err, false)
	}
	return lost, nil
}

// DeadLetter archives the task (asynq's archived zset) with dl in the task
// hash's sy_dl field and dl.Error as asynq's last error.
func (d *Driver) DeadLetter(ctx context.Context, dv *broker.Delivery, dl *broker.DeadLetter) error {
	if err := d.check("dead-letter"); err != nil {
		return err
	}
	h, err := handleOf("dead-letter", dv)
	if err != nil {
		return err
	}
	if dl == nil {
		return broker.Invalidf("dead-letter: nil dead letter")
	}
	if dl.At.IsZero() {
		dl.At = time.Now().UTC()
	}
	if h.dead {
		rec, err := broker.EncodeDeadLetter(dl)
		if err != nil {
			return broker.Wrap("dead-letter", broker.Permanent, err)
		}
		lost, err := d.deadOp(ctx, "update", h.k, "", string(rec), []*handle{h})
		if err != nil {
			return err
		}
		return lostError("dead-letter", lost)
	}
	msg := ""
	if h.tm != nil {
		tm := *h.tm
		tm.ErrorMsg = dl.Error
		tm.LastFailedAt = dl.At.Unix()
		msg = string(tm.encode())
	}
	lost, err := d.archive(ctx, h.k, h.id, h.tok, msg, dl)
	if err != nil {
		return err
	}
	if lost {
		return broker.LeaseLostError("dead-letter", h.id)
	}
	return nil
}

// Replay moves a dead letter back to its queue's pending list as a fresh
// task: retried, last error and failure time cleared, ID kept.
func (d *Driver) Replay(ctx context.Context, dv *broker.Delivery) error {
	if err := d.check("replay"); err != nil {
		return err
	}
	h, err := handleOf("replay", dv)
	if err != nil {
		return err
	}
	if !h.dead {
		return broker.Invalidf("replay: delivery %s is not from a dead-letter queue", dv.ID)
	}
	msg := ""
	if h.tm != nil {
		tm := *h.tm
		tm.Retried = 0
		tm.ErrorMsg = ""
		tm.LastFailedAt = 0
		msg = string(tm.encode())
	}
	lost, err := d.deadOp(ctx, "replay", h.k, msg, "", []*handle{h})
	if err != nil {
		return err
	}
	return lostError("replay", lost)
}
