package embedded

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/switchyard-dev/switchyard/broker"
)

var _ broker.Browser = (*Driver)(nil)

// browseReadySQL reads ready messages in the order receiveSQL leases them
// (visible_at, seq), after the cursor (visible_at, seq), without writing.
const browseReadySQL = `SELECT seq, visible_at, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, attempts, dead_letter
FROM sy_messages
WHERE lane_id = ?1 AND dead = 0 AND visible_at <= ?2 AND (visible_at > ?3 OR (visible_at = ?3 AND seq > ?4))
ORDER BY visible_at, seq
LIMIT ?5 + 0`

// browseDeadSQL reads dead letters in the order receiveDeadSQL leases them.
const browseDeadSQL = `SELECT seq, visible_at, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, attempts, dead_letter
FROM sy_messages
WHERE lane_id = ?1 AND dead = 1 AND seq > ?2
ORDER BY seq
LIMIT ?3 + 0`

// Browse implements broker.Browser with a plain SELECT: nothing is leased,
// no attempt is counted and no message moves. A dead letter that is leased
// by a scan at the moment is listed too (it is still in the queue). The
// cursor is "<visible_at>:<seq>" of the last message of the page.
func (d *Driver) Browse(ctx context.Context, req broker.BrowseRequest) (*broker.BrowsePage, error) {
	if d.closed.Load() {
		return nil, broker.ClosedError("browse")
	}
	var afterVis, afterSeq int64 = -1 << 62, 0
	if req.After != "" {
		v, s, ok := strings.Cut(req.After, ":")
		av, err1 := strconv.ParseInt(v, 10, 64)
		as, err2 := strconv.ParseInt(s, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, broker.Invalidf("browse: bad cursor %q", req.After)
		}
		afterVis, afterSeq = av, as
	}
	n := max(req.Max, 1)
	laneID, ok, err := d.laneID(ctx, req.Lane, false)
	if err != nil {
		return nil, classify("browse", err)
	}
	if !ok {
		return &broker.BrowsePage{}, nil // never published to: empty
	}
	// One more than asked, to know whether there is a next page.
	q, args := browseReadySQL, []any{laneID, d.nowNano(), afterVis, afterSeq, n + 1}
	if req.DeadLetters {
		q, args = browseDeadSQL, []any{laneID, afterSeq, n + 1}
	}
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, classify("browse", err)
	}
	defer rows.Close()
	page := &broker.BrowsePage{}
	var lastVis, lastSeq int64
	for rows.Next() {
		var (
			seq, vis, runAt, enq, maxAtt, attempts int64
			id, kind, tenant, idem, ord            string
			body, hdr, dlb                         []byte
		)
		if err := rows.Scan(&seq, &vis, &id, &kind, &body, &hdr, &tenant, &idem, &ord, &runAt, &enq, &maxAtt, &attempts, &dlb); err != nil {
			return nil, classify("browse", err)
		}
		if len(page.Messages) == n {
			page.Next = strconv.FormatInt(lastVis, 10) + ":" + strconv.FormatInt(lastSeq, 10)
			break
		}
		lastVis, lastSeq = vis, seq
		dv := &broker.Delivery{
			Message: broker.Message{
				ID: id, Lane: req.Lane, Kind: kind, Body: body, Tenant: tenant, IdempotencyKey: idem, OrderingKey: ord,
				RunAt: fromNano(runAt), EnqueuedAt: fromNano(enq), MaxAttempts: int(maxAtt),
			},
			Attempt: int(min(max(attempts, 0), broker.MaxAttemptsLimit)),
		}
		if len(hdr) > 0 {
			_ = json.Unmarshal(hdr, &dv.Headers) // shown without them when they do not decode
		}
		if req.DeadLetters {
			dv.DeadLetter = &broker.DeadLetter{Reason: broker.ReasonUndecodable}
			if len(dlb) > 0 {
				dl, err := broker.DecodeDeadLetter(dlb)
				switch {
				case err != nil:
					dv.DeadLetter.Error = err.Error()
				case dl.Reason == "":
					dl.Reason = broker.ReasonUndecodable
					dv.DeadLetter = dl
				default:
					dv.DeadLetter = dl
				}
			}
		}
		page.Messages = append(page.Messages, dv)
	}
	if err := rows.Err(); err != nil {
		return nil, classify("browse", err)
	}
	return page, nil
}
