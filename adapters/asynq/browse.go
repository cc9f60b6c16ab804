package asynq

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
)

var _ broker.Browser = (*Driver)(nil)

// Browse implements broker.Browser with reads only: LRANGE on the pending
// list (its right end is the head), then the due scheduled and retry tasks
// (ZRANGEBYSCORE up to now, which the next receive forwards), or ZRANGE on
// the archive for dead letters. Nothing is leased or moved. The cursor is
// the position of the next message in that sequence.
func (d *Driver) Browse(ctx context.Context, req broker.BrowseRequest) (*broker.BrowsePage, error) {
	if err := d.check("browse"); err != nil {
		return nil, err
	}
	var off int64
	if req.After != "" {
		n, err := strconv.ParseInt(req.After, 10, 64)
		if err != nil || n < 0 {
			return nil, broker.Invalidf("browse: bad cursor %q", req.After)
		}
		off = n
	}
	n := int64(max(req.Max, 1))
	k := d.keys(req.Lane)
	var ids []string
	more := false
	if req.DeadLetters {
		got, err := d.rdb.ZRange(ctx, k.archived, off, off+n).Result()
		if err != nil {
			return nil, classify("browse", err, false)
		}
		ids = got
	} else {
		got, err := d.readyIDs(ctx, k, off, n+1)
		if err != nil {
			return nil, err
		}
		ids = got
	}
	if int64(len(ids)) > n {
		ids, more = ids[:n], true
	}
	page := &broker.BrowsePage{}
	if len(ids) > 0 {
		pipe := d.rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, len(ids))
		for i, id := range ids {
			cmds[i] = pipe.HMGet(ctx, k.task+id, "msg", "sy_dl")
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, classify("browse", err, false)
		}
		for i, id := range ids {
			vals, _ := cmds[i].Result()
			if len(vals) < 2 {
				continue
			}
			raw, _ := vals[0].(string)
			rec, _ := vals[1].(string)
			if raw == "" {
				continue // taken and deleted meanwhile
			}
			if req.DeadLetters {
				dv, _ := deadDelivery(id, raw, rec, req.Lane)
				page.Messages = append(page.Messages, dv)
				continue
			}
			tm, err := decodeTaskMessage([]byte(raw))
			var m *broker.Message
			if err == nil {
				m, err = fromTask(tm, id, req.Lane)
			}
			if err != nil {
				// The next receive dead-letters it; show it as stored.
				page.Messages = append(page.Messages, &broker.Delivery{Message: broker.Message{ID: id, Lane: req.Lane, Body: []byte(raw)}})
				continue
			}
			page.Messages = append(page.Messages, &broker.Delivery{Message: *m, Attempt: int(tm.Retried)})
		}
	}
	if more {
		page.Next = strconv.FormatInt(off+n, 10)
	}
	return page, nil
}

// readyIDs returns up to n ready task ids from position off: the pending
// list from its head (the right end), then the due scheduled and retry
// tasks, oldest first.
func (d *Driver) readyIDs(ctx context.Context, k *keys, off, n int64) ([]string, error) {
	plen, err := d.rdb.LLen(ctx, k.pending).Result()
	if err != nil {
		return nil, classify("browse", err, false)
	}
	var ids []string
	if off < plen {
		// LRANGE counts from the left; the head is the right end.
		got, err := d.rdb.LRange(ctx, k.pending, -(off + n), -(off + 1)).Result()
		if err != nil {
			return nil, classify("browse", err, false)
		}
		for i := len(got) - 1; i >= 0; i-- {
			ids = append(ids, got[i])
		}
	}
	rest := off - plen // position within the due tasks
	now := score(time.Now())
	for _, z := range []string{k.scheduled, k.retry} {
		if int64(len(ids)) >= n {
			break
		}
		if rest < 0 {
			rest = 0
		}
		due, err := d.rdb.ZCount(ctx, z, "-inf", now).Result()
		if err != nil {
			return nil, classify("browse", err, false)
		}
		if rest >= due {
			rest -= due
			continue
		}
		got, err := d.rdb.ZRangeByScore(ctx, z, &redis.ZRangeBy{Min: "-inf", Max: now, Offset: rest, Count: n - int64(len(ids))}).Result()
		if err != nil {
			return nil, classify("browse", err, false)
		}
		ids = append(ids, got...)
		rest = 0
	}
	return ids, nil
}
