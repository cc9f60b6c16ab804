package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

var _ broker.Browser = (*Driver)(nil)

// Browse implements broker.Browser with a plain SELECT: nothing is leased,
// no attempt is counted and no row changes. Ready rows come in the order
// Receive leases them (visibility, then publish order); the cursor is
// "<visible_at in Unix microseconds>:<seq>" of the page's last row. Dead
// letters come in the order they died; their cursor is ":<seq>".
func (d *Driver) Browse(ctx context.Context, req broker.BrowseRequest) (*broker.BrowsePage, error) {
	if err := d.check("browse"); err != nil {
		return nil, err
	}
	afterVis, afterSeq := time.Unix(0, 0).UTC(), int64(0)
	if req.After != "" {
		v, s, ok := strings.Cut(req.After, ":")
		as, err2 := strconv.ParseInt(s, 10, 64)
		av, err1 := int64(0), error(nil)
		if v != "" {
			av, err1 = strconv.ParseInt(v, 10, 64)
		}
		if !ok || err1 != nil || err2 != nil || as < 0 {
			return nil, broker.Invalidf("browse: bad cursor %q", req.After)
		}
		afterVis, afterSeq = time.UnixMicro(av).UTC(), as
	}
	n := max(req.Max, 1)
	q, args := d.q.browse, []any{req.Lane, afterVis, afterSeq, n + 1}
	if req.DeadLetters {
		q, args = d.q.browseDead, []any{req.Lane, afterSeq, n + 1}
	}
	rows, err := d.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, classify("browse", err, false)
	}
	defer rows.Close()
	page := &broker.BrowsePage{}
	var last row
	for rows.Next() {
		r := row{deadQueue: req.DeadLetters}
		if err := rows.Scan(append(r.dest(), &r.deadLetter)...); err != nil {
			return nil, classify("browse", err, false)
		}
		if len(page.Messages) == n {
			if req.DeadLetters {
				page.Next = ":" + strconv.FormatInt(last.seq, 10)
			} else {
				page.Next = strconv.FormatInt(last.visibleAt.UnixMicro(), 10) + ":" + strconv.FormatInt(last.seq, 10)
			}
			break
		}
		last = r
		dv, _ := decodeRow(req.Lane, &r) // shown as stored when it does not decode
		page.Messages = append(page.Messages, dv)
	}
	if err := rows.Err(); err != nil {
		return nil, classify("browse", err, false)
	}
	return page, nil
}
