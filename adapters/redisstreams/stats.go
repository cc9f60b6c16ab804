package redisstreams

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
)

// Stats reads the lane's depths with one script call:
//
//   - Ready: entries of the live stream not delivered yet (its length less
//     the consumer group's pending entries);
//   - InFlight: entries in the lease set (leased; an expired lease counts
//     until the entry is reclaimed);
//   - Delayed: messages whose run-at is ahead plus nacked entries whose
//     delay has not been served;
//   - DeadLettered: the dead-letter stream's length;
//   - OldestReady: the age of the first undelivered entry (its ID's time:
//     when it was added, or promoted from the delay set).
func (d *Driver) Stats(ctx context.Context, lane string) (broker.Stats, error) {
	if err := d.checkOpen("stats"); err != nil {
		return broker.Stats{}, err
	}
	q, err := d.queue(lane, false)
	if err != nil {
		return broker.Stats{}, err
	}
	dq := d.keys.queue(lane, true)
	st := broker.Stats{Lane: lane}
	v, err := statsScript.Run(ctx, d.rdb, []string{q.stream, q.lease, q.wait, q.delay, dq.stream}, group).Slice()
	if err != nil {
		return st, classify("stats", scrub(err, d.cfg), false)
	}
	if len(v) != 6 {
		return st, broker.Errorf("stats", broker.Transient, "redis-streams: unexpected stats reply of %d items", len(v))
	}
	st.Ready, _ = v[0].(int64)
	st.InFlight, _ = v[1].(int64)
	st.Delayed, _ = v[2].(int64)
	st.DeadLettered, _ = v[3].(int64)
	st.Ready = max(st.Ready, 0)
	oldest, _ := v[4].(string)
	now, _ := v[5].(int64)
	if ms, err := strconv.ParseInt(entryTime(oldest), 10, 64); err == nil && oldest != "" && st.Ready > 0 {
		st.OldestReady = max(time.Duration(now-ms)*time.Millisecond, time.Nanosecond)
	}
	return st, nil
}

var entryIDRE = regexp.MustCompile(`^[0-9]{1,20}-[0-9]{1,20}$`)

// Browse implements broker.Browser with XRANGE, which neither delivers nor
// acks anything: ready entries are those after the consumer group's
// last-delivered ID, dead letters every entry of the dead-letter stream.
// The cursor is the last entry ID of the previous page. Ready entries have
// never been delivered (Attempt 0); nacked entries waiting for their delay
// and messages whose run-at is ahead are not listed.
func (d *Driver) Browse(ctx context.Context, req broker.BrowseRequest) (*broker.BrowsePage, error) {
	if err := d.checkOpen("browse"); err != nil {
		return nil, err
	}
	q, err := d.queue(req.Lane, req.DeadLetters)
	if err != nil {
		return nil, err
	}
	if req.After != "" && !entryIDRE.MatchString(req.After) {
		return nil, broker.Invalidf("browse: bad cursor %q", req.After)
	}
	start := "-"
	if !req.DeadLetters {
		gs, err := d.rdb.XInfoGroups(ctx, q.stream).Result()
		if err != nil && !isNoGroup(err) && !isNoKey(err) {
			return nil, classify("browse", scrub(err, d.cfg), false)
		}
		for _, g := range gs {
			if g.Name == group {
				start = "(" + g.LastDeliveredID
			}
		}
	}
	if req.After != "" && (start == "-" || compareIDs(req.After, start[1:]) > 0) {
		start = "(" + req.After
	}
	n := max(req.Max, 1)
	xs, err := d.rdb.XRangeN(ctx, q.stream, start, "+", int64(n+1)).Result()
	if err != nil && err != redis.Nil {
		return nil, classify("browse", scrub(err, d.cfg), false)
	}
	page := &broker.BrowsePage{}
	for i, x := range xs {
		if i == n {
			page.Next = xs[n-1].ID
			break
		}
		f := make(map[string]string, len(x.Values))
		for k, v := range x.Values {
			if s, ok := v.(string); ok {
				f[k] = s
			}
		}
		if req.DeadLetters {
			page.Messages = append(page.Messages, deadDelivery(req.Lane, x.ID, f))
			continue
		}
		env, err := broker.DecodeEnvelope([]byte(f[fieldEnvelope]))
		if err != nil {
			// The next receive dead-letters it; show it as stored.
			env = &broker.Message{ID: undecodableID(x.ID), Body: []byte(f[fieldEnvelope])}
		}
		env.Lane = req.Lane
		page.Messages = append(page.Messages, &broker.Delivery{Message: *env})
	}
	return page, nil
}

// compareIDs orders two stream entry IDs ("ms-seq").
func compareIDs(a, b string) int {
	am, as := splitID(a)
	bm, bs := splitID(b)
	switch {
	case am != bm:
		if am < bm {
			return -1
		}
		return 1
	case as != bs:
		if as < bs {
			return -1
		}
		return 1
	}
	return 0
}

func splitID(id string) (uint64, uint64) {
	ms, _ := strconv.ParseUint(entryTime(id), 10, 64)
	var seq uint64
	if i := len(entryTime(id)); i < len(id) {
		seq, _ = strconv.ParseUint(id[i+1:], 10, 64)
	}
	return ms, seq
}

func isNoKey(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such key")
}
