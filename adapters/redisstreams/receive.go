package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
)

// Fields of a stream entry.
const (
	fieldEnvelope   = "e"  // broker.EncodeEnvelope bytes (live and dead entries)
	fieldDeadLetter = "dl" // broker.EncodeDeadLetter JSON (dead entries)
	fieldID         = "i"  // the message ID (dead entries; also undecodable ones)
	fieldAttempt    = "a"  // the attempt at dead-lettering time (dead entries)
)

// maxDeadLetterRecord bounds the dead-letter record kept in an entry.
const maxDeadLetterRecord = 64 << 10

// handle is the driver's state of one delivery (Delivery.Handle).
type handle struct {
	d      *Driver
	q      *queue
	id     string // stream entry ID
	member string // the lease-set member of this delivery: its fencing token
	rels   int64  // releases so far
	gen    int64
	raw    []byte // the entry's envelope field as stored

	mu      sync.Mutex
	settled bool
}

// entry is one stream entry as a script returned it.
type entry struct {
	member    string // "<id> <generation> <releases>"
	id        string
	fields    map[string]string
	gen, rels int64
}

// Receive leases up to req.Max entries with one script call (see
// receiveScript). When none is ready and req.Wait allows, it blocks on the
// stream with XREAD BLOCK from the last entry ID the script saw — so an
// entry added meanwhile wakes it at once — for at most poll, and no later
// than the next delayed message, nack delay or lease end, then runs the
// script again.
func (d *Driver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	if err := d.checkOpen("receive"); err != nil {
		return nil, err
	}
	q, err := d.queue(req.Lane, req.DeadLetters)
	if err != nil {
		return nil, err
	}
	if err := d.ensure(ctx, q, false); err != nil {
		return nil, err
	}
	n := min(max(req.Max, 1), d.cfg.MaxBatch)
	leaseMS := durMS(req.Lease, 1)
	deadline := time.Now().Add(req.Wait)
	for {
		sent := time.Now()
		r, err := d.lease(ctx, q, n, leaseMS, req.Wait > 0)
		if err != nil {
			return nil, err
		}
		out := make([]*broker.Delivery, 0, len(r.entries))
		for _, e := range r.entries {
			if dv := d.toDelivery(ctx, q, e, sent.Add(time.Duration(leaseMS)*time.Millisecond)); dv != nil {
				out = append(out, dv)
			}
		}
		if len(out) > 0 {
			return out, nil
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return out, nil
		}
		if len(r.entries) > 0 {
			continue // all undecodable, dead-lettered: look again
		}
		wait := min(left, d.cfg.Poll)
		if r.next > 0 {
			wait = min(wait, time.Duration(r.next-r.now)*time.Millisecond)
		}
		if wait < time.Millisecond {
			wait = time.Millisecond
		}
		if err := d.block(ctx, q, r.last, wait); err != nil {
			if ctx.Err() != nil {
				return out, nil
			}
			return nil, err
		}
	}
}

// leased is what one run of receiveScript returned.
type leased struct {
	now, next int64 // server time and the next due time (ms; 0: none)
	last      string
	entries   []entry
}

// lease runs receiveScript, recreating the stream's group once if it is
// gone.
func (d *Driver) lease(ctx context.Context, q *queue, n int, leaseMS int64, info bool) (*leased, error) {
	flag, trim := "0", "0"
	if info {
		flag = "1"
	}
	if q.dueTrim() {
		trim = "1"
	}
	ks := []string{q.stream, q.lease, q.wait, q.delay, q.held}
	v, err := receiveScript.Run(ctx, d.rdb, ks, group, d.cfg.Consumer, n, leaseMS, flag, trim).Result()
	if isNoGroup(err) {
		if err = d.ensure(ctx, q, true); err == nil {
			v, err = receiveScript.Run(ctx, d.rdb, ks, group, d.cfg.Consumer, n, leaseMS, flag, trim).Result()
		}
	}
	if err != nil {
		if d.closed.Load() {
			return nil, broker.ClosedError("receive")
		}
		return nil, classify("receive", scrub(err, d.cfg), false)
	}
	r, err := parseLeased(v)
	if err != nil {
		return nil, broker.Wrap("receive", broker.Transient, err)
	}
	return r, nil
}

// parseLeased reads receiveScript's reply. It never panics on a reply of
// another shape; it says what it expected instead.
func parseLeased(v any) (*leased, error) {
	top, ok := v.([]any)
	if !ok || len(top) != 4 {
		return nil, fmt.Errorf("redis-streams: unexpected receive reply %T", v)
	}
	r := &leased{}
	r.now, _ = top[0].(int64)
	r.next, _ = top[1].(int64)
	r.last, _ = top[2].(string)
	list, _ := top[3].([]any)
	for _, x := range list {
		e, ok := parseEntry(x)
		if !ok {
			return nil, fmt.Errorf("redis-streams: unexpected entry in the receive reply")
		}
		r.entries = append(r.entries, e)
	}
	return r, nil
}

// parseEntry reads {member, {field, value, …}, generation, releases}.
func parseEntry(x any) (entry, bool) {
	a, ok := x.([]any)
	if !ok || len(a) != 4 {
		return entry{}, false
	}
	var e entry
	if e.member, ok = a[0].(string); !ok || e.member == "" {
		return entry{}, false
	}
	e.id, _, _ = strings.Cut(e.member, " ")
	e.fields = fieldMap(a[1])
	e.gen, _ = a[2].(int64)
	e.rels, _ = a[3].(int64)
	return e, true
}

// fieldMap turns a flat field/value list into a map; non-string items and
// an odd last item are ignored.
func fieldMap(x any) map[string]string {
	a, _ := x.([]any)
	m := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		k, ok1 := a[i].(string)
		v, ok2 := a[i+1].(string)
		if ok1 && ok2 {
			if _, dup := m[k]; !dup {
				m[k] = v
			}
		}
	}
	return m
}

// block waits on the stream for an entry after last (or for wait to pass).
func (d *Driver) block(ctx context.Context, q *queue, last string, wait time.Duration) error {
	if last == "" {
		last = "$"
	}
	err := d.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{q.stream, last}, Count: 1, Block: wait}).Err()
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	if d.closed.Load() {
		return broker.ClosedError("receive")
	}
	return classify("receive", scrub(err, d.cfg), false)
}

// toDelivery turns a leased entry into a delivery. A live entry that does
// not hold a valid envelope is dead-lettered with broker.ReasonUndecodable
// and yields nil.
func (d *Driver) toDelivery(ctx context.Context, q *queue, e entry, leaseEnd time.Time) *broker.Delivery {
	raw, hasEnv := e.fields[fieldEnvelope]
	h := &handle{d: d, q: q, id: e.id, member: e.member, gen: e.gen, rels: e.rels, raw: []byte(raw)}
	attempt := int(min(max(1+e.gen-e.rels, 1), broker.MaxAttemptsLimit+1))
	if q.dead {
		dv := deadDelivery(q.lane, e.id, e.fields)
		dv.LeaseDeadline, dv.Handle = leaseEnd, h
		return dv
	}
	var env *broker.Message
	err := errors.New("the entry has no envelope field \"e\"")
	if hasEnv {
		env, err = broker.DecodeEnvelope(h.raw)
	}
	if err != nil {
		d.deadLetterUndecodable(ctx, h, e, attempt, err)
		return nil
	}
	env.Lane = q.lane
	return &broker.Delivery{Message: *env, Attempt: attempt, LeaseDeadline: leaseEnd, Handle: h}
}

// undecodableID is the ID a dead letter gets when its entry names none.
func undecodableID(entryID string) string { return "redis-" + entryID }

// deadLetterUndecodable moves an entry that is not a Switchyard message to
// the dead-letter stream. On failure it stays leased and is tried again
// after its lease.
func (d *Driver) deadLetterUndecodable(ctx context.Context, h *handle, e entry, attempt int, cause error) {
	now := time.Now().UTC()
	dl := &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: cause.Error(), At: now,
		Attempts: []broker.AttemptRecord{{Attempt: attempt, Start: now, Class: "permanent", Error: cause.Error()}}}
	raw := h.raw
	if _, ok := e.fields[fieldEnvelope]; !ok {
		raw = []byte(fmt.Sprint(e.fields)) // keep what was there, for the operator
	}
	if err := d.move(ctx, "dead-letter", h, d.keys.queue(h.q.lane, true).stream, deadFields(raw, dl, undecodableID(e.id), attempt)); err != nil {
		d.log.Warn("redis-streams: dead-lettering an undecodable entry failed; it comes back after its lease", "lane", h.q.lane, "entry", e.id, "err", err)
	}
}

// deadFields are the fields of a dead-letter entry.
func deadFields(raw []byte, dl *broker.DeadLetter, id string, attempt int) []any {
	rec, err := encodeDeadLetter(dl)
	if err != nil {
		rec = []byte(`{"Reason":"` + string(dl.Reason) + `"}`)
	}
	return []any{fieldEnvelope, raw, fieldDeadLetter, rec, fieldID, id, fieldAttempt, attempt}
}

// deadDelivery decodes a dead-letter entry into a delivery without a
// handle. Entries written by others decode as far as they go: a missing
// record reads as broker.ReasonDeliveryLimit with a note, a missing
// envelope keeps the raw bytes as the body.
func deadDelivery(lane, entryID string, f map[string]string) *broker.Delivery {
	dl, err := broker.DecodeDeadLetter([]byte(f[fieldDeadLetter]))
	if err != nil || dl.Reason == "" {
		dl = &broker.DeadLetter{Reason: broker.ReasonDeliveryLimit, Error: "dead-letter record missing or unreadable"}
		if ms, err := strconv.ParseInt(entryTime(entryID), 10, 64); err == nil {
			dl.At = time.UnixMilli(ms).UTC()
		}
	}
	raw := []byte(f[fieldEnvelope])
	env, err := broker.DecodeEnvelope(raw)
	if err != nil {
		env = &broker.Message{ID: f[fieldID], Body: raw}
		if broker.ValidateID(env.ID) != nil {
			env.ID = undecodableID(entryID)
		}
	}
	env.Lane = lane
	attempt, aerr := strconv.Atoi(f[fieldAttempt])
	if aerr != nil || attempt < 0 || attempt > broker.MaxAttemptsLimit+1 {
		attempt = 0 // absent, or written by another producer: unknown
	}
	return &broker.Delivery{Message: *env, Attempt: attempt, DeadLetter: dl}
}

// entryTime is the millisecond part of a stream entry ID.
func entryTime(id string) string {
	for i := 0; i < len(id); i++ {
		if id[i] == '-' {
			return id[:i]
		}
	}
	return id
}

// encodeDeadLetter encodes dl, trimming the history and error texts if the
// record would be too large.
func encodeDeadLetter(dl *broker.DeadLetter) ([]byte, error) {
	b, err := broker.EncodeDeadLetter(dl)
	if err != nil || len(b) <= maxDeadLetterRecord {
		return b, err
	}
	c := *dl
	if len(c.Attempts) > 20 {
		c.Attempts = append(append([]broker.AttemptRecord{}, c.Attempts[:5]...), c.Attempts[len(c.Attempts)-15:]...)
	} else {
		c.Attempts = append([]broker.AttemptRecord{}, c.Attempts...)
	}
	for i := range c.Attempts {
		c.Attempts[i].Error = truncate(c.Attempts[i].Error, 512)
	}
	c.Error = truncate(c.Error, 4096)
	return broker.EncodeDeadLetter(&c)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n-- // not in the middle of a UTF-8 sequence
	}
	return s[:n] + "…(truncated)"
}
