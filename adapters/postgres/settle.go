package postgres

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/broker"
)

func handleOf(op string, dv *broker.Delivery) (handle, error) {
	if dv == nil {
		return handle{}, broker.Invalidf("%s: nil delivery", op)
	}
	h, ok := dv.Handle.(handle)
	if !ok {
		return handle{}, broker.Invalidf("%s: delivery %s was not received from the postgres broker", op, dv.ID)
	}
	return h, nil
}

// Ack implements broker.Driver: one DELETE for the batch, guarded by each
// delivery's lease token. Acking the head of an ordering key notifies its
// lane, so that the next of the key starts at once.
func (d *Driver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	if err := d.check("ack"); err != nil {
		return err
	}
	if len(ds) == 0 {
		return nil
	}
	var live, dead [2][]int64
	want := make(map[handle]string, len(ds))
	for _, dv := range ds {
		h, err := handleOf("ack", dv)
		if err != nil {
			return err
		}
		if h.dead {
			dead[0], dead[1] = append(dead[0], h.seq), append(dead[1], h.token)
		} else {
			live[0], live[1] = append(live[0], h.seq), append(live[1], h.token)
		}
		want[h] = dv.ID
	}
	var keyed []string
	for _, part := range []struct {
		q    string
		cols [2][]int64
		dead bool
	}{{d.q.ack, live, false}, {d.q.ackDead, dead, true}} {
		if len(part.cols[0]) == 0 {
			continue
		}
		rows, err := d.pool.Query(ctx, part.q, part.cols[0], part.cols[1])
		if err != nil {
			return classify("ack", err, true)
		}
		for rows.Next() {
			var seq int64
			var lane, ord string
			if err := rows.Scan(&seq, &lane, &ord); err != nil {
				rows.Close()
				return classify("ack", err, true)
			}
			for h := range want {
				if h.seq == seq && h.dead == part.dead {
					delete(want, h)
				}
			}
			if ord != "" && !part.dead {
				keyed = append(keyed, lane)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return classify("ack", err, true)
		}
	}
	d.notify(ctx, keyed...)
	if len(want) > 0 {
		lost := make([]string, 0, len(want))
		for _, id := range want {
			lost = append(lost, id)
		}
		return broker.LeaseLostError("ack", strings.Join(lost, ","))
	}
	return nil
}

// notify tells every receiver of lanes (in every process) to look again;
// best effort: a lost notification costs at most one poll interval.
func (d *Driver) notify(ctx context.Context, lanes ...string) {
	if len(lanes) == 0 {
		return
	}
	seen := map[string]bool{}
	b := &pgx.Batch{}
	for _, l := range lanes {
		if !seen[l] {
			seen[l] = true
			b.Queue(`SELECT pg_notify($1, $2)`, d.channel, l)
			d.waker(l).broadcast()
		}
	}
	_ = d.pool.SendBatch(context.WithoutCancel(ctx), b).Close()
}

// exec runs one guarded single-row update and reports ErrLeaseLost when
// the guard matched nothing.
func (d *Driver) exec(ctx context.Context, op string, dv *broker.Delivery, q string, args ...any) error {
	if err := d.check(op); err != nil {
		return err
	}
	tag, err := d.pool.Exec(ctx, q, args...)
	if err != nil {
		return classify(op, err, true)
	}
	if tag.RowsAffected() == 0 {
		return broker.LeaseLostError(op, dv.ID)
	}
	return nil
}

// Nack implements broker.Driver.
func (d *Driver) Nack(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	return d.nack(ctx, dv, delay, "")
}

// NackWithError implements broker.NackErrorer: the error text is kept in
// the row's last_error column, which psql and any SQL tool show.
func (d *Driver) NackWithError(ctx context.Context, dv *broker.Delivery, delay time.Duration, errText string) error {
	return d.nack(ctx, dv, delay, errText)
}

func (d *Driver) nack(ctx context.Context, dv *broker.Delivery, delay time.Duration, errText string) error {
	h, err := handleOf("nack", dv)
	if err != nil {
		return err
	}
	if h.dead {
		err = d.exec(ctx, "nack", dv, d.q.releaseDead, h.seq, h.token, delay.Microseconds())
	} else if errText != "" {
		err = d.exec(ctx, "nack", dv, d.q.nackErr, h.seq, h.token, delay.Microseconds(), errText)
	} else {
		err = d.exec(ctx, "nack", dv, d.q.nack, h.seq, h.token, delay.Microseconds())
	}
	if err == nil {
		d.notify(ctx, dv.Lane)
	}
	return err
}

// Release implements broker.Releaser: the message becomes deliverable after
// delay and its next delivery keeps the same attempt number.
func (d *Driver) Release(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	h, err := handleOf("release", dv)
	if err != nil {
		return err
	}
	q := d.q.release
	if h.dead {
		q = d.q.releaseDead
	}
	err = d.exec(ctx, "release", dv, q, h.seq, h.token, delay.Microseconds())
	if err == nil {
		d.notify(ctx, dv.Lane)
	}
	return err
}

// Extend implements broker.Driver: one UPDATE for the batch.
func (d *Driver) Extend(ctx context.Context, ds []*broker.Delivery, lease time.Duration) error {
	if err := d.check("extend"); err != nil {
		return err
	}
	start := time.Now()
	for _, dead := range []bool{false, true} {
		var seqs, tokens []int64
		byseq := map[int64]*broker.Delivery{}
		for _, dv := range ds {
			h, err := handleOf("extend", dv)
			if err != nil {
				return err
			}
			if h.dead == dead {
				seqs, tokens = append(seqs, h.seq), append(tokens, h.token)
				byseq[h.seq] = dv
			}
		}
		if len(seqs) == 0 {
			continue
		}
		q := d.q.extend
		if dead {
			q = d.q.extendDead
		}
		rows, err := d.pool.Query(ctx, q, seqs, tokens, lease.Microseconds())
		if err != nil {
			return classify("extend", err, true)
		}
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return classify("extend", err, true)
			}
			if dv := byseq[seq]; dv != nil {
				dv.LeaseDeadline = start.Add(lease)
				delete(byseq, seq)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return classify("extend", err, true)
		}
		if len(byseq) > 0 {
			lost := make([]string, 0, len(byseq))
			for _, dv := range byseq {
				lost = append(lost, dv.ID)
			}
			return broker.LeaseLostError("extend", strings.Join(lost, ","))
		}
	}
	return nil
}

// DeadLetter implements broker.Driver: the row moves to the dead-letter
// table with its record, in one statement.
func (d *Driver) DeadLetter(ctx context.Context, dv *broker.Delivery, dl *broker.DeadLetter) error {
	if err := d.check("dead-letter"); err != nil {
		return err
	}
	h, err := handleOf("dead-letter", dv)
	if err != nil {
		return err
	}
	if h.dead {
		return broker.Invalidf("dead-letter: delivery %s is already a dead letter", dv.ID)
	}
	enc, err := broker.EncodeDeadLetter(dl)
	if err != nil {
		return broker.Wrap("dead-letter", broker.Permanent, err)
	}
	var lane, ord string
	err = d.pool.QueryRow(ctx, d.q.toDead, h.seq, h.token, enc).Scan(&lane, &ord)
	if errors.Is(err, pgx.ErrNoRows) {
		return broker.LeaseLostError("dead-letter", dv.ID)
	}
	if err != nil {
		return classify("dead-letter", err, true)
	}
	if ord != "" {
		d.notify(ctx, lane)
	}
	return nil
}

// Replay implements broker.Driver: the dead letter moves back to the live
// table as a new row (attempts from 1, at the back of its lane).
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
	var lane string
	err = d.pool.QueryRow(ctx, d.q.replay, h.seq, h.token).Scan(&lane)
	if errors.Is(err, pgx.ErrNoRows) {
		return broker.LeaseLostError("replay", dv.ID)
	}
	if err != nil {
		return classify("replay", err, true)
	}
	d.notify(ctx, lane)
	return nil
}

// Stats implements broker.Driver with one aggregate over the lane's rows.
func (d *Driver) Stats(ctx context.Context, lane string) (broker.Stats, error) {
	if err := d.check("stats"); err != nil {
		return broker.Stats{}, err
	}
	s := broker.Stats{Lane: lane}
	var oldest float64
	err := d.pool.QueryRow(ctx, d.q.stats, lane).Scan(&s.Ready, &s.InFlight, &s.Delayed, &oldest, &s.DeadLettered)
	if err != nil {
		return broker.Stats{}, classify("stats", err, false)
	}
	if oldest > 0 {
		s.OldestReady = time.Duration(oldest * float64(time.Second))
	}
	return s, nil
}

// Lanes implements broker.LaneLister: the lanes with live or dead rows.
func (d *Driver) Lanes(ctx context.Context) ([]string, error) {
	if err := d.check("lanes"); err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, d.q.lanes)
	if err != nil {
		return nil, classify("lanes", err, false)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, classify("lanes", err, false)
}
