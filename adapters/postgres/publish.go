package postgres

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-dev/switchyard/broker"
)

// Publish implements broker.Driver. A batch without idempotency or
// ordering keys is one INSERT statement (its own transaction); with keys,
// one transaction: the keys' locks, the deduplication claims, then the
// INSERT. Each lane published to is notified once, at commit.
func (d *Driver) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	if err := d.check("publish"); err != nil {
		return nil, err
	}
	var res []broker.PublishResult
	keyed := false
	for _, m := range msgs {
		if m.IdempotencyKey != "" || m.OrderingKey != "" {
			keyed = true
			break
		}
	}
	var err error
	if !keyed {
		res, err = d.publishIn(ctx, d.pool, msgs)
	} else {
		err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			var e error
			res, e = d.publishIn(ctx, tx, msgs)
			return e
		})
	}
	if err != nil {
		return nil, classify("publish", err, true)
	}
	d.wakeLocal(msgs)
	return res, nil
}

// PublishTx publishes msgs inside the caller's transaction tx, which must
// be on this driver's database: the messages are enqueued if and only if
// tx commits, and consumers are notified at commit. Use it to make a
// business write and its tasks one transaction (the ledger's outbox does
// the same for every broker, with a relay in between).
//
// Unlike Publish, the messages are not checked or completed by Broker:
// each must be valid (broker.Message.Validate) with an ID and EnqueuedAt
// set, and at most Capabilities().MaxMessageSize; an invalid one fails the
// call with ErrInvalid or ErrTooLarge and nothing is written. A duplicate
// idempotency key within the window reports the first message's ID with
// Duplicate set.
func (d *Driver) PublishTx(ctx context.Context, tx pgx.Tx, msgs []*broker.Message) ([]broker.PublishResult, error) {
	if err := d.check("publish"); err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, broker.Invalidf("publish: nil transaction")
	}
	for _, m := range msgs {
		if err := m.Validate(); err != nil {
			return nil, err
		}
		if m.ID == "" || m.EnqueuedAt.IsZero() {
			return nil, broker.Invalidf("publish: message %q needs an ID and EnqueuedAt (broker.NewID, time.Now)", m.ID)
		}
		if m.Size() > d.cfg.MaxMessageSize {
			return nil, &broker.Error{Op: "publish", Class: broker.Permanent, Kind: broker.ErrTooLarge, Err: &broker.TooLargeError{Size: m.Size(), Max: d.cfg.MaxMessageSize}}
		}
	}
	res, err := d.publishIn(ctx, tx, msgs)
	return res, classify("publish", err, true)
}

// execer is a pool, a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// publishIn writes msgs with q; with keys q must be a transaction.
func (d *Driver) publishIn(ctx context.Context, q execer, msgs []*broker.Message) ([]broker.PublishResult, error) {
	res := make([]broker.PublishResult, len(msgs))
	var lockKeys []string
	var claims []int
	for i, m := range msgs {
		res[i].ID = m.ID
		if m.OrderingKey != "" {
			lockKeys = append(lockKeys, d.cfg.Schema+"|"+m.Lane+"|"+m.OrderingKey)
		}
		if m.IdempotencyKey != "" {
			claims = append(claims, i)
		}
	}
	if len(lockKeys) > 0 {
		if _, err := q.Exec(ctx, d.q.lockKeys, lockKeys); err != nil {
			return nil, err
		}
	}
	skip := map[int]bool{}
	if len(claims) > 0 {
		// One claim per statement, in batch order: a key repeated within
		// the batch is a duplicate of its first message.
		b := &pgx.Batch{}
		window := d.cfg.DedupWindow.Microseconds()
		for _, i := range claims {
			m := msgs[i]
			b.Queue(d.q.dedup, m.Lane, m.Tenant, m.IdempotencyKey, m.ID, window)
		}
		br := q.SendBatch(ctx, b)
		for _, i := range claims {
			var id string
			var mine bool
			err := br.QueryRow().Scan(&id, &mine)
			if errors.Is(err, pgx.ErrNoRows) {
				// Claimed by a transaction that committed while this
				// statement waited on it: read the claim now.
				id = ""
				mine = false
			} else if err != nil {
				br.Close()
				return nil, err
			}
			if !mine {
				res[i] = broker.PublishResult{ID: id, Duplicate: true}
				skip[i] = true
			}
		}
		if err := br.Close(); err != nil {
			return nil, err
		}
		for i := range skip {
			if res[i].ID == "" {
				m := msgs[i]
				if err := q.QueryRow(ctx, d.q.dedupRead, m.Lane, m.Tenant, m.IdempotencyKey).Scan(&res[i].ID); err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return nil, err
				}
			}
		}
	}
	n := len(msgs) - len(skip)
	if n == 0 {
		return res, nil
	}
	var (
		lanes, ids, kinds, tenants, idems, ords = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		runAts, enqs                            = make([]int64, 0, n), make([]int64, 0, n)
		maxAtts                                 = make([]int32, 0, n)
		hdrs, bodies                            = make([][]byte, 0, n), make([][]byte, 0, n)
	)
	for i, m := range msgs {
		if skip[i] {
			continue
		}
		var hdr []byte
		if len(m.Headers) > 0 {
			var err error
			if hdr, err = json.Marshal(m.Headers); err != nil {
				return nil, broker.Wrap("publish", broker.Permanent, err)
			}
		}
		body := m.Body
		if body == nil {
			body = []byte{}
		}
		lanes, ids, kinds, tenants = append(lanes, m.Lane), append(ids, m.ID), append(kinds, m.Kind), append(tenants, m.Tenant)
		idems, ords = append(idems, m.IdempotencyKey), append(ords, m.OrderingKey)
		runAts, enqs = append(runAts, nanos(m.RunAt)), append(enqs, nanos(m.EnqueuedAt))
		maxAtts = append(maxAtts, int32(m.MaxAttempts))
		hdrs, bodies = append(hdrs, hdr), append(bodies, body)
	}
	if _, err := q.Exec(ctx, d.q.insert, lanes, ids, kinds, tenants, idems, ords, runAts, enqs, maxAtts, hdrs, bodies, d.channel); err != nil {
		return nil, err
	}
	return res, nil
}

// wakeLocal wakes this process's receivers of the published lanes at
// once, without waiting for the notification's round trip.
func (d *Driver) wakeLocal(msgs []*broker.Message) {
	var last string
	for _, m := range msgs {
		if m.Lane != last {
			last = m.Lane
			d.waker(m.Lane).broadcast()
		}
	}
}
