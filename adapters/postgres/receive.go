package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/broker"
)

// handle is the driver's per-delivery reference: the row and the token of
// the lease that took it.
type handle struct {
	seq   int64
	token int64
	dead  bool
}

func newToken() int64 {
	for {
		if t := rand.Int64(); t != 0 {
			return t
		}
	}
}

// row is one queue row as a receive or browse reads it.
type row struct {
	seq                      int64
	id, kind                 string
	body, headers            []byte
	tenant, idemKey, ordKey  string
	runAt, enqueuedAt        int64
	maxAttempts, attempts    int32
	visibleAt                time.Time
	deadLetter               []byte
	hasDeadLetter, deadQueue bool
}

func (r *row) dest() []any {
	return []any{&r.seq, &r.id, &r.kind, &r.body, &r.headers, &r.tenant, &r.idemKey, &r.ordKey, &r.runAt, &r.enqueuedAt, &r.maxAttempts, &r.attempts, &r.visibleAt}
}

// decodeRow turns a row of lane into a delivery. The delivery is always
// returned (so that an undecodable row can be dead-lettered with what it
// holds); the error, matching broker.ErrUndecodable, says why it must not
// reach a handler: headers that are not a JSON object of strings, or a
// message that fails broker.Message.Validate or broker.CheckDecoded (a bad
// ID, kind, key, header or attempt limit written behind the driver's
// back). It never panics.
func decodeRow(lane string, r *row) (*broker.Delivery, error) {
	dv := &broker.Delivery{
		Message: broker.Message{
			ID: r.id, Lane: lane, Kind: r.kind, Body: r.body, Tenant: r.tenant, IdempotencyKey: r.idemKey, OrderingKey: r.ordKey,
			RunAt: fromNanos(r.runAt), EnqueuedAt: fromNanos(r.enqueuedAt), MaxAttempts: int(r.maxAttempts),
		},
		Attempt: int(min(max(r.attempts, 0), broker.MaxAttemptsLimit)),
	}
	if r.deadQueue {
		dv.DeadLetter = decodeDeadLetter(r.deadLetter)
	}
	var err error
	if len(r.headers) > 0 {
		var h map[string]string
		if jerr := json.Unmarshal(r.headers, &h); jerr != nil {
			err = fmt.Errorf("%w: headers: %v", broker.ErrUndecodable, jerr)
		} else if len(h) > 0 {
			dv.Headers = h
		}
	}
	if err == nil {
		if verr := dv.Message.Validate(); verr != nil {
			err = fmt.Errorf("%w: %w", broker.ErrUndecodable, verr)
		}
	}
	if err == nil {
		err = broker.CheckDecoded(&dv.Message)
	}
	return dv, err
}

// decodeDeadLetter reads a dead-letter record; a missing or corrupt one
// still gives a record with a reason.
func decodeDeadLetter(b []byte) *broker.DeadLetter {
	if len(b) == 0 {
		return &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: "dead letter without a record"}
	}
	dl, err := broker.DecodeDeadLetter(b)
	if err != nil {
		return &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: err.Error()}
	}
	if dl.Reason == "" {
		dl.Reason = broker.ReasonUndecodable // a dead letter always has a reason
	}
	return dl
}

// Receive implements broker.Driver. A waiting receive sleeps until a
// notification for its lane (LISTEN/NOTIFY, sent at every publish
// commit), until the lane's next row becomes visible (a run-at, a nack
// delay or a lease's end, asked of the table), or at most Config.Poll.
func (d *Driver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	var deadline time.Time
	if req.Wait > 0 {
		deadline = time.Now().Add(req.Wait)
	}
	if req.Max <= 0 {
		req.Max = 1
	}
	for {
		if err := d.check("receive"); err != nil {
			return nil, err
		}
		ch := d.waker(req.Lane).wait()
		ds, err := d.receiveOnce(ctx, req)
		if err != nil || len(ds) > 0 || req.Wait <= 0 {
			return ds, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		sleep := min(left, d.cfg.Poll)
		if !req.DeadLetters {
			var due float64
			if err := d.pool.QueryRow(ctx, d.q.nextDue, req.Lane).Scan(&due); err != nil {
				return nil, d.receiveErr(ctx, err)
			}
			if due >= 0 {
				sleep = min(sleep, time.Duration(due*float64(time.Second))+time.Millisecond)
			}
		}
		t := time.NewTimer(sleep)
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

func (d *Driver) receiveErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return broker.Wrap("receive", broker.Transient, cerr)
	}
	return classify("receive", err, false)
}

type deadMove struct {
	seq, token int64
	ordered    bool
	dl         *broker.DeadLetter
}

func (d *Driver) receiveOnce(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	token := newToken()
	start := time.Now()
	q := d.q.receive
	if req.DeadLetters {
		q = d.q.receiveDead
	}
	rows, err := d.pool.Query(ctx, q, req.Lane, req.Max, token, req.Lease.Microseconds())
	if err != nil {
		return nil, d.receiveErr(ctx, err)
	}
	var (
		out   []*broker.Delivery
		vis   = map[*broker.Delivery]time.Time{}
		seqs  = map[*broker.Delivery]int64{}
		moves []deadMove
	)
	for rows.Next() {
		r := row{deadQueue: req.DeadLetters}
		dest := r.dest()
		if req.DeadLetters {
			dest = append(dest, &r.deadLetter)
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return nil, d.receiveErr(ctx, err)
		}
		dv, derr := decodeRow(req.Lane, &r)
		dv.LeaseDeadline = start.Add(req.Lease)
		dv.Handle = handle{seq: r.seq, token: token, dead: req.DeadLetters}
		if req.DeadLetters {
			out = append(out, dv)
		} else if derr != nil {
			moves = append(moves, deadMove{seq: r.seq, token: token, ordered: r.ordKey != "", dl: &broker.DeadLetter{
				Reason: broker.ReasonUndecodable, Error: "undecodable message: " + derr.Error(), At: time.Now().UTC()}})
			continue
		} else if limit := limitOr(r.maxAttempts, d.cfg.DefaultMaxAttempts); int64(r.attempts) > limit {
			moves = append(moves, deadMove{seq: r.seq, token: token, ordered: r.ordKey != "", dl: &broker.DeadLetter{
				Reason: broker.ReasonMaxAttempts, Error: fmt.Sprintf("attempt %d exceeds the limit of %d", r.attempts, limit), At: time.Now().UTC(),
				Attempts: []broker.AttemptRecord{{Attempt: int(r.attempts - 1), Error: "lease expired or nacked"}}}})
			continue
		} else {
			out = append(out, dv)
		}
		vis[dv], seqs[dv] = r.visibleAt, r.seq
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, d.receiveErr(ctx, err)
	}
	if len(moves) > 0 {
		if err := d.moveDead(ctx, req.Lane, moves); err != nil {
			// They stay leased and come back after their lease.
			return nil, d.receiveErr(ctx, err)
		}
	}
	// In the queue's order: visibility, then publish order.
	sort.SliceStable(out, func(i, j int) bool {
		vi, vj := vis[out[i]], vis[out[j]]
		if !vi.Equal(vj) {
			return vi.Before(vj)
		}
		return seqs[out[i]] < seqs[out[j]]
	})
	if err := ctx.Err(); err != nil && len(out) > 0 {
		// Cancelled after the lease was taken: a caller that gave up may
		// drop the deliveries, so give them back unspent first.
		rel := context.WithoutCancel(ctx)
		for _, dv := range out {
			h := dv.Handle.(handle)
			q := d.q.release
			if h.dead {
				q = d.q.releaseDead
			}
			if _, rerr := d.pool.Exec(rel, q, h.seq, h.token, int64(0)); rerr != nil {
				break // it comes back when its lease ends
			}
		}
		d.waker(req.Lane).broadcast()
		return nil, broker.Wrap("receive", broker.Transient, err)
	}
	return out, nil
}

// moveDead moves leased rows of lane to the dead-letter table, in one
// round trip, and wakes the lane when a keyed row left (the next of its
// key may start).
func (d *Driver) moveDead(ctx context.Context, lane string, moves []deadMove) error {
	b := &pgx.Batch{}
	ordered := false
	for _, m := range moves {
		enc, err := broker.EncodeDeadLetter(m.dl)
		if err != nil {
			return broker.Wrap("dead-letter", broker.Permanent, err)
		}
		b.Queue(d.q.toDead, m.seq, m.token, enc)
		ordered = ordered || m.ordered
	}
	if ordered {
		b.Queue(`SELECT pg_notify($1, $2)`, d.channel, lane)
	}
	return d.pool.SendBatch(ctx, b).Close()
}

func limitOr(n int32, def int) int64 {
	if n > 0 {
		return int64(n)
	}
	return int64(def)
}

// nanos is t in Unix nanoseconds, 0 for the zero time (clamped, never
// wrapped).
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return broker.UnixNano(t)
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
