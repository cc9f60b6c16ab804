package embedded

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// handle is the driver's per-delivery reference.
type handle struct {
	seq   int64
	token int64
}

func newToken() int64 {
	for {
		if t := rand.Int64(); t != 0 {
			return t
		}
	}
}

// The receive queries cap the attempt count before adding one: a tampered
// row's count would otherwise overflow to a REAL that no longer scans, and
// fail every Receive of the lane.
//
// The ordering subquery repeats the partial index's condition on p (a
// non-empty ordering key, implied by m's) so that SQLite can use
// sy_messages_order; without it each candidate with an ordering key
// scanned the lane's ready index (TestQueryPlans).
//
// The receive statements' LIMIT is "?6 + 0", not "?6": SQLite (3.50 with
// STAT4) marks a bare LIMIT parameter as plan-relevant, so binding it on
// every call expired the prepared statement, which was then re-prepared on
// its next step (sqlite3Reprepare: about a tenth of the runtime's CPU). An
// expression is not inspected, so the statement stays prepared.
const receiveSQL = `UPDATE sy_messages SET attempts = MIN(attempts, 2147483646) + 1, lease_token = ?1, visible_at = ?2
WHERE seq IN (
	SELECT seq FROM sy_messages m
	WHERE m.lane_id = ?3 AND m.dead = 0 AND m.visible_at <= ?4
	  AND (m.ord_key = '' OR NOT EXISTS (
		SELECT 1 FROM sy_messages p
		WHERE p.lane_id = m.lane_id AND p.ord_key = m.ord_key AND p.ord_key <> '' AND p.seq < m.seq AND p.dead = 0))
	ORDER BY m.visible_at, m.seq
	LIMIT ?5 + 0)
RETURNING seq, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, attempts`

const receiveUnorderedSQL = `UPDATE sy_messages SET attempts = MIN(attempts, 2147483646) + 1, lease_token = ?1, visible_at = ?2
WHERE seq IN (
	SELECT seq FROM sy_messages m
	WHERE m.lane_id = ?3 AND m.dead = 0 AND m.visible_at <= ?4
	ORDER BY m.visible_at, m.seq
	LIMIT ?5 + 0)
RETURNING seq, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, attempts`

const receiveDeadSQL = `UPDATE sy_messages SET lease_token = ?1, visible_at = ?2
WHERE seq IN (
	SELECT seq FROM sy_messages m
	WHERE m.lane_id = ?3 AND m.dead = 1 AND m.visible_at <= ?4
	ORDER BY m.seq
	LIMIT ?5 + 0)
RETURNING seq, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, attempts, dead_letter`

// Receive implements broker.Driver. It waits for a publish in this process
// or polls every Config.Poll for messages from other processes and
// messages becoming due.
func (d *Driver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	var deadline time.Time
	if req.Wait > 0 {
		deadline = time.Now().Add(req.Wait)
	}
	for {
		if d.closed.Load() {
			return nil, broker.ClosedError("receive")
		}
		ch := d.shared.waker(d.cfg.Namespace, req.Lane).wait()
		ds, err := d.receiveOnce(ctx, req)
		if err != nil || len(ds) > 0 || req.Wait <= 0 {
			return ds, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		t := time.NewTimer(min(left, d.cfg.Poll))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, broker.Wrap("receive", broker.Transient, ctx.Err())
		case <-d.stop:
			t.Stop()
			return nil, broker.ClosedError("receive")
		case <-ch:
			t.Stop()
		case <-t.C:
		}
	}
}

func (d *Driver) receiveOnce(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	laneID, ok, err := d.laneID(ctx, req.Lane, false)
	if err != nil {
		return nil, d.receiveErr(ctx, err)
	}
	if !ok {
		return nil, nil // never published to: empty
	}
	token := newToken()
	var now, leaseEnd int64
	var out []*broker.Delivery
	err = d.shared.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if d.closed.Load() {
			return broker.ClosedError("receive")
		}
		// The clock is read in the transaction: a receive that waited for
		// its turn still gets its whole lease.
		now = d.nowNano()
		leaseEnd = now + int64(req.Lease)
		q := receiveSQL
		if d.cfg.Reduced {
			q = receiveUnorderedSQL
		}
		if req.DeadLetters {
			q = receiveDeadSQL
		}
		st, err := d.txStmt(ctx, tx, q)
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(ctx, token, leaseEnd, laneID, now, req.Max)
		if err != nil {
			return err
		}
		out = nil
		type bad struct {
			seq int64
			dl  *broker.DeadLetter
		}
		var toDead []bad
		for rows.Next() {
			var (
				seq, runAt, enq, maxAtt, attempts int64
				id, kind, tenant, idem, ord       string
				body, hdr, dlb                    []byte
			)
			dest := []any{&seq, &id, &kind, &body, &hdr, &tenant, &idem, &ord, &runAt, &enq, &maxAtt, &attempts}
			if req.DeadLetters {
				dest = append(dest, &dlb)
			}
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return err
			}
			dv := &broker.Delivery{
				Message: broker.Message{
					ID: id, Lane: req.Lane, Kind: kind, Body: body, Tenant: tenant, IdempotencyKey: idem, OrderingKey: ord,
					RunAt: fromNano(runAt), EnqueuedAt: fromNano(enq), MaxAttempts: int(maxAtt),
				},
				Attempt:       int(attempts),
				LeaseDeadline: fromNano(leaseEnd),
				Handle:        handle{seq: seq, token: token},
			}
			var decodeErr error
			if len(hdr) > 0 {
				decodeErr = json.Unmarshal(hdr, &dv.Headers)
			}
			if decodeErr == nil {
				decodeErr = broker.ValidateName("kind", kind)
			}
			if decodeErr == nil {
				// A row written behind the framework's back (or tampered
				// with): a bad ID would loop in the runtime, whose ledger
				// refuses it.
				decodeErr = broker.CheckDecoded(&dv.Message)
			}
			if req.DeadLetters {
				if len(dlb) > 0 {
					dl, err := broker.DecodeDeadLetter(dlb)
					if err != nil {
						dl = &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: err.Error()}
					} else if dl.Reason == "" {
						dl.Reason = broker.ReasonUndecodable // a dead letter always has a reason
					}
					dv.DeadLetter = dl
				} else {
					dv.DeadLetter = &broker.DeadLetter{Reason: broker.ReasonUndecodable}
				}
				out = append(out, dv)
				continue
			}
			switch {
			case decodeErr != nil:
				toDead = append(toDead, bad{seq, &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: "undecodable message: " + decodeErr.Error(), At: d.cfg.Now().UTC()}})
			case attempts > limitOr(maxAtt, d.cfg.DefaultMaxAttempts) && !d.cfg.Reduced:
				toDead = append(toDead, bad{seq, &broker.DeadLetter{Reason: broker.ReasonMaxAttempts,
					Error: fmt.Sprintf("attempt %d exceeds the limit of %d", attempts, limitOr(maxAtt, d.cfg.DefaultMaxAttempts)), At: d.cfg.Now().UTC(),
					Attempts: []broker.AttemptRecord{{Attempt: int(attempts - 1), Error: "lease expired or nacked"}}}})
			default:
				out = append(out, dv)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		for _, b := range toDead {
			enc, _ := broker.EncodeDeadLetter(b.dl)
			if _, err := tx.ExecContext(ctx, `UPDATE sy_messages SET dead = 1, lease_token = 0, visible_at = ?, dead_letter = ? WHERE seq = ?`,
				now, enc, b.seq); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, d.receiveErr(ctx, err)
	}
	if err := ctx.Err(); err != nil && len(out) > 0 {
		// Cancelled after the lease was taken: a caller that gave up may
		// drop the deliveries, so give them back unspent first.
		rel := context.WithoutCancel(ctx)
		q := `UPDATE sy_messages SET visible_at = ?, lease_token = 0, attempts = MAX(attempts - 1, 0) WHERE seq = ? AND lease_token = ?`
		if req.DeadLetters {
			q = `UPDATE sy_messages SET visible_at = ?, lease_token = 0 WHERE seq = ? AND lease_token = ?`
		}
		for _, dv := range out {
			h := dv.Handle.(handle)
			if rerr := d.exec(rel, "receive", dv, q, now, h.seq, h.token); rerr != nil {
				return nil, d.receiveErr(ctx, rerr) // it comes back when its lease ends
			}
		}
		d.wake(req.Lane)
		return nil, broker.Wrap("receive", broker.Transient, err)
	}
	return out, nil
}

// receiveErr classifies a receive error; once ctx has ended it is the
// context's error (database/sql rolls the transaction back when the context
// ends, and later calls on it fail with sql.ErrTxDone, which is not the
// cause).
func (d *Driver) receiveErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return broker.Wrap("receive", broker.Transient, cerr)
	}
	return classify("receive", err)
}

func limitOr(n int64, def int) int64 {
	if n > 0 {
		return n
	}
	return int64(def)
}
