package asynq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
)

func init() {
	broker.Register("redis", open)
	broker.Register("rediss", open)
}

func open(ctx context.Context, u *url.URL) (broker.Driver, error) {
	return Open(ctx, u)
}

// Driver is the broker.Driver for Redis, in asynq's data layout. Open it
// through broker.Open with a redis:// or rediss:// URL, or with Open.
type Driver struct {
	cfg    *Config
	rdb    *redis.Client
	notify *notifier
	log    *slog.Logger

	queuesKnown sync.Map // queue name -> struct{}: SADD asynq:queues done
	closed      atomic.Bool
	done        chan struct{}
	closeOnce   sync.Once
}

var (
	_ broker.Driver   = (*Driver)(nil)
	_ broker.Releaser = (*Driver)(nil)
)

// Open connects to the Redis the URL names and checks it answers (PING,
// which also checks the credentials).
func Open(ctx context.Context, u *url.URL) (*Driver, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg)
}

// OpenConfig is Open with a Config built by hand; zero fields get their
// defaults (as documented on Config), and cfg itself is not modified.
func OpenConfig(ctx context.Context, cfg *Config) (*Driver, error) {
	if cfg == nil {
		return nil, broker.Invalidf("asynq adapter: nil config")
	}
	cfg = cfg.withDefaults()
	opt := &redis.Options{
		Addr:                  cfg.Addr,
		Username:              cfg.Username,
		Password:              cfg.Password,
		DB:                    cfg.DB,
		TLSConfig:             cfg.TLS,
		DialTimeout:           cfg.DialTimeout,
		ReadTimeout:           cfg.ReadTimeout,
		WriteTimeout:          cfg.WriteTimeout,
		PoolSize:              cfg.PoolSize,
		PoolTimeout:           cfg.ReadTimeout,
		ContextTimeoutEnabled: true,
		// The driver never retries (policy lives above it); a retried
		// script could also run twice.
		MaxRetries:      -1,
		DisableIdentity: true,
		Protocol:        2,
	}
	c := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout+cfg.ReadTimeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("asynq adapter: redis at %s: %w", cfg.Addr, classify("open", err, false))
	}
	d := &Driver{cfg: cfg, rdb: c, log: slog.Default().With("broker", "asynq", "addr", cfg.Addr), done: make(chan struct{})}
	d.notify = newNotifier(c)
	return d, nil
}

// Config returns the driver's configuration (do not modify it).
func (d *Driver) Config() *Config { return d.cfg }

// QueueName returns the asynq queue that carries lane.
func (d *Driver) QueueName(lane string) string { return QueueName(d.cfg.Namespace, lane) }

// Capabilities reports what Redis in asynq's layout does natively.
func (d *Driver) Capabilities() broker.Capabilities {
	return broker.Capabilities{
		MaxDelay:          0, // the scheduled zset holds any horizon
		MaxLease:          0,
		LeaseExtension:    true,
		Dedup:             true,
		DedupWindow:       d.cfg.DedupWindow,
		Ordering:          true,
		DeadLetterReasons: true,
		MaxAttempts:       false, // Broker checks on receive; crashes count through retried
		MaxMessageSize:    d.cfg.MaxMessageSize,
		MaxBatch:          d.cfg.MaxBatch,
		OldestReadyAge:    true,
	}
}

// keys holds the Redis keys of one queue.
type keys struct {
	name, prefix, task                                 string
	pending, active, lease, scheduled, retry, archived string
	paused, olock, dlease, notify, processed, failed   string
}

func (d *Driver) keys(lane string) *keys {
	q := d.QueueName(lane)
	p := "asynq:{" + q + "}:"
	return &keys{
		name: q, prefix: p, task: p + "t:",
		pending: p + "pending", active: p + "active", lease: p + "lease",
		scheduled: p + "scheduled", retry: p + "retry", archived: p + "archived",
		paused: p + "paused", olock: p + "sy:olock", dlease: p + "sy:dlease", notify: p + "sy:notify",
		processed: p + "processed", failed: p + "failed",
	}
}

func (k *keys) idem(tenant, key string) string {
	return k.prefix + "sy:idem:" + strconv.Itoa(len(tenant)) + ":" + tenant + ":" + key
}

func (k *keys) daily(counter string, now time.Time) string {
	return counter + ":" + now.UTC().Format("2006-01-02")
}

// statsTTL matches asynq's expiry of its daily counters.
const statsTTL = 90 * 24 * time.Hour

func score(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// handle is a Delivery's reference to its task.
type handle struct {
	k    *keys
	id   string
	tok  string
	tm   *taskMessage // nil when the stored message is undecodable
	dead bool
}

func (d *Driver) check(op string) error {
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	return nil
}

func handleOf(op string, dl *broker.Delivery) (*handle, error) {
	if dl == nil {
		return nil, broker.Invalidf("%s: nil delivery", op)
	}
	h, ok := dl.Handle.(*handle)
	if !ok || h == nil {
		return nil, broker.Invalidf("%s: delivery %s was not received through the asynq adapter", op, dl.ID)
	}
	return h, nil
}

func (d *Driver) markQueue(ctx context.Context, k *keys) error {
	if _, ok := d.queuesKnown.Load(k.name); ok {
		return nil
	}
	if err := d.rdb.SAdd(ctx, "asynq:queues", k.name).Err(); err != nil {
		return err
	}
	d.queuesKnown.Store(k.name, struct{}{})
	return nil
}

// Publish enqueues msgs: ready ones on the queue's pending list, future
// ones in its scheduled zset, in one script call per lane.
func (d *Driver) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	if err := d.check("publish"); err != nil {
		return nil, err
	}
	res := make([]broker.PublishResult, len(msgs))
	now := time.Now()
	// Group by lane, keeping order within each lane.
	var lanes []string
	byLane := map[string][]int{}
	for i, m := range msgs {
		if m == nil {
			res[i].Err = broker.Invalidf("publish: nil message")
			continue
		}
		res[i].ID = m.ID
		if _, ok := byLane[m.Lane]; !ok {
			lanes = append(lanes, m.Lane)
		}
		byLane[m.Lane] = append(byLane[m.Lane], i)
	}
	ttl := "0"
	if d.cfg.DedupWindow > 0 {
		ttl = strconv.FormatInt(max(d.cfg.DedupWindow.Milliseconds(), 1), 10)
	}
	for _, lane := range lanes {
		k := d.keys(lane)
		argv := []any{k.task, now.UnixNano(), ttl}
		var sent []int
		for _, i := range byLane[lane] {
			m := msgs[i]
			tm, err := toTask(m, k.name)
			if err != nil {
				res[i].Err = err
				continue
			}
			sc := ""
			if m.RunAt.After(now) {
				sc = score(m.RunAt)
			}
			// A message the framework holds (a run-at beyond MaxDelay) carries
			// its idempotency key in a header; claim it all the same, so the
			// key is deduplicated while the message is held.
			ikey := ""
			if key := cmp.Or(m.IdempotencyKey, m.Headers[broker.HeaderHeldKey]); key != "" {
				ikey = k.idem(m.Tenant, key)
			}
			hold := ""
			if _, ok := m.Headers[broker.HeaderHoldUntil]; ok {
				hold = "1"
			}
			argv = append(argv, m.ID, tm.encode(), sc, m.OrderingKey, ikey, hold)
			sent = append(sent, i)
		}
		if len(sent) == 0 {
			continue
		}
		fail := func(err error) {
			for _, i := range sent {
				res[i].Err = err
			}
		}
		if err := d.markQueue(ctx, k); err != nil {
			fail(classify("publish", err, false)) // nothing of the batch was written
			continue
		}
		out, err := publishScript.Run(ctx, d.rdb, []string{k.pending, k.scheduled, k.active, k.lease, k.notify}, argv...).Slice()
		if err == nil && len(out) != 2*len(sent) {
			err = broker.Errorf("publish", broker.UnknownOutcome, "publish script returned %d values for %d messages", len(out), len(sent))
		}
		if err != nil {
			fail(classify("publish", err, true))
			continue
		}
		for j, i := range sent {
			code, _ := out[2*j].(int64)
			id, _ := out[2*j+1].(string)
			switch code {
			case 0, 2:
				res[i].Duplicate = true
				if id != "" {
					res[i].ID = id
				}
			}
		}
	}
	return res, nil
}

// Receive leases up to req.Max tasks in one script call per look. When the
// queue is empty it waits for a notification (Pub/Sub), the next due
// scheduled task or expiring lease, or the poll interval, whichever is
// first, until req.Wait has passed.
func (d *Driver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	if err := d.check("receive"); err != nil {
		return nil, err
	}
	if req.Max <= 0 {
		req.Max = 1
	}
	if req.Max > d.cfg.MaxBatch {
		req.Max = d.cfg.MaxBatch
	}
	if req.Lease <= 0 {
		req.Lease = 30 * time.Second
	}
	k := d.keys(req.Lane)
	deadline := time.Now().Add(req.Wait)
	for {
		var wake <-chan struct{}
		if req.Wait > 0 {
			wake = d.notify.wait(ctx, k.notify)
		}
		var (
			ds    []*broker.Delivery
			next  time.Duration
			again bool
			err   error
		)
		if cerr := ctx.Err(); cerr != nil {
			return nil, &broker.Error{Op: "receive", Class: broker.Transient, Err: cerr}
		}
		// The script runs to its end even if ctx ends meanwhile: a reply
		// abandoned mid-flight would leave its tasks leased to no one
		// until the lease ends. Redis's read timeout still bounds it.
		sctx := context.WithoutCancel(ctx)
		if req.DeadLetters {
			ds, err = d.receiveDead(sctx, k, req)
			next = -1
		} else {
			ds, next, again, err = d.dequeue(sctx, k, req)
		}
		if err != nil {
			return nil, err
		}
		if cerr := ctx.Err(); cerr != nil && len(ds) > 0 {
			// Cancelled: a caller that gave up may drop the deliveries;
			// give them back unspent first.
			for _, dv := range ds {
				if rerr := d.Release(sctx, dv, 0); rerr != nil {
					d.log.Warn("asynq: could not give back a task taken by a cancelled receive; it comes back after its lease", "queue", k.name, "id", dv.ID, "err", rerr)
				}
			}
			return nil, &broker.Error{Op: "receive", Class: broker.Transient, Err: cerr}
		}
		left := time.Until(deadline)
		if len(ds) > 0 || req.Wait <= 0 || left <= 0 {
			return ds, nil
		}
		if again {
			continue
		}
		sleep := min(left, d.cfg.Poll)
		if next >= 0 && next < sleep {
			sleep = next
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, &broker.Error{Op: "receive", Class: broker.Transient, Err: ctx.Err()}
		case <-d.done:
			t.Stop()
			return nil, broker.ClosedError("receive")
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// dequeue is one look at the queue. again reports that expired leases were
// recovered, so another look may find them.
func (d *Driver) dequeue(ctx context.Context, k *keys, req broker.ReceiveRequest) ([]*broker.Delivery, time.Duration, bool, error) {
	now := time.Now()
	leaseEnd := now.Add(req.Lease)
	leaseEnd = time.UnixMilli(leaseEnd.UnixMilli())
	window := min(max(4*req.Max, 100), 2000)
	res, err := dequeueScript.Run(ctx, d.rdb,
		[]string{k.pending, k.active, k.lease, k.paused, k.scheduled, k.retry, k.olock},
		k.task, score(now), now.UnixNano(), score(leaseEnd), req.Max, window).Slice()
	if err != nil {
		return nil, 0, false, classify("receive", err, false)
	}
	if len(res) != 3 {
		return nil, 0, false, broker.Errorf("receive", broker.Permanent, "dequeue script returned %d values", len(res))
	}
	nextMS, _ := res[0].(int64)
	items, _ := res[1].([]any)
	expired, _ := res[2].([]any)
	ds := make([]*broker.Delivery, 0, len(items)/3)
	for i := 0; i+2 < len(items); i += 3 {
		id, _ := items[i].(string)
		raw, _ := items[i+1].(string)
		tok, _ := items[i+2].(string)
		if raw == "" {
			d.deadLetterMissing(ctx, k, id, tok)
			continue
		}
		tm, err := decodeTaskMessage([]byte(raw))
		var m *broker.Message
		if err == nil {
			m, err = fromTask(tm, id, req.Lane)
		}
		if err != nil {
			d.deadLetterUndecodable(ctx, k, id, tok, err)
			continue
		}
		ds = append(ds, &broker.Delivery{
			Message:       *m,
			Attempt:       int(tm.Retried) + 1,
			LeaseDeadline: leaseEnd,
			Handle:        &handle{k: k, id: id, tok: tok, tm: tm},
		})
	}
	again := false
	if len(expired) > 0 {
		n, err := d.recoverExpired(ctx, k, expired, now)
		if err != nil && len(ds) == 0 {
			return nil, 0, false, err
		}
		again = n > 0
	}
	next := time.Duration(-1)
	if nextMS >= 0 {
		next = time.Duration(nextMS) * time.Millisecond
	}
	return ds, next, again, nil
}

// recoverExpired returns tasks whose lease expired (a crashed, stuck or
// closed consumer) to the head of the queue with retried + 1, as asynq's
// recoverer does, so their next delivery has a higher Attempt.
func (d *Driver) recoverExpired(ctx context.Context, k *keys, expired []any, now time.Time) (int64, error) {
	argv := []any{k.task, score(now), now.UnixNano()}
	for i := 0; i+2 < len(expired); i += 3 {
		id, _ := expired[i].(string)
		raw, _ := expired[i+1].(string)
		tok, _ := expired[i+2].(string)
		if raw == "" {
			if !d.deadLetterMissing(ctx, k, id, tok) {
				// The hash is gone altogether: nothing to archive. The
				// recover script drops the orphan id; say so.
				d.log.Warn("asynq: removed a leased task id whose task hash is gone (deleted behind the framework's back); no dead letter is possible",
					"queue", k.name, "id", id)
				argv = append(argv, id, tok, "")
			}
			continue
		}
		tm, err := decodeTaskMessage([]byte(raw))
		if err == nil {
			_, err = fromTask(tm, id, "")
		}
		if err != nil {
			d.deadLetterUndecodable(ctx, k, id, tok, err)
			continue
		}
		tm.Retried++
		tm.ErrorMsg = "switchyard: lease expired"
		tm.LastFailedAt = now.Unix()
		argv = append(argv, id, tok, tm.encode())
	}
	if len(argv) == 3 {
		return 0, nil
	}
	n, err := recoverScript.Run(ctx, d.rdb, []string{k.active, k.lease, k.pending, k.notify}, argv...).Int64()
	if err != nil {
		return 0, classify("receive: recover", err, false)
	}
	return n, nil
}

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
		dv := &broker.Delivery{LeaseDeadline: leaseEnd}
		h := &handle{k: k, id: id, tok: tok, dead: true}
		tm, err := decodeTaskMessage([]byte(raw))
		var m *broker.Message
		if err == nil {
			m, err = fromTask(tm, id, req.Lane)
		}
		if err == nil {
			h.tm = tm
			dv.Message = *m
			dv.Attempt = int(tm.Retried) + 1
		} else {
			// Undecodable: hand back the stored bytes as the body.
			dv.Message = broker.Message{ID: id, Lane: req.Lane, Body: []byte(raw)}
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
		dv.Handle = h
		ds = append(ds, dv)
	}
	return ds, nil
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

// groupHandles splits deliveries by queue and kind (live or dead letter).
func groupHandles(op string, ds []*broker.Delivery) (map[string][]*handle, []string, error) {
	groups := map[string][]*handle{}
	var order []string
	for _, dv := range ds {
		h, err := handleOf(op, dv)
		if err != nil {
			return nil, nil, err
		}
		g := h.k.name
		if h.dead {
			g = "dead\x00" + g
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], h)
	}
	return groups, order, nil
}

func lostError(op string, lost []string) error {
	if len(lost) == 0 {
		return nil
	}
	if len(lost) == 1 {
		return broker.LeaseLostError(op, lost[0])
	}
	return broker.KindError(op, broker.Permanent, broker.ErrLeaseLost, "%d messages (first %s): %w", len(lost), lost[0], broker.ErrLeaseLost)
}

// Ack deletes the tasks (asynq's "done"), or, for dead letters, removes
// them from the archive for good. A delivery whose lease passed to another
// consumer is left alone and reported with ErrLeaseLost.
func (d *Driver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	if err := d.check("ack"); err != nil {
		return err
	}
	groups, order, err := groupHandles("ack", ds)
	if err != nil {
		return err
	}
	var lost []string
	now := time.Now()
	for _, g := range order {
		hs := groups[g]
		k := hs[0].k
		var l []string
		if hs[0].dead {
			l, err = d.deadOp(ctx, "ack", k, "", "", hs)
		} else {
			argv := make([]any, 0, 2+2*len(hs))
			argv = append(argv, k.task, now.Add(statsTTL).Unix())
			for _, h := range hs {
				argv = append(argv, h.id, h.tok)
			}
			l, err = ackScript.Run(ctx, d.rdb, []string{k.active, k.lease, k.olock, k.daily(k.processed, now), k.processed}, argv...).StringSlice()
			err = classify("ack", err, false)
		}
		if err != nil {
			return err
		}
		lost = append(lost, l...)
	}
	return lostError("ack", lost)
}

// Nack moves the task to asynq's retry zset (or straight back to pending
// when delay is zero) with retried + 1.
func (d *Driver) Nack(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	return d.giveBack(ctx, "nack", dv, delay, true)
}

// Release is Nack without spending an attempt (broker.Releaser): retried
// stays as it was, so the next delivery has the same Attempt.
func (d *Driver) Release(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	return d.giveBack(ctx, "release", dv, delay, false)
}

func (d *Driver) giveBack(ctx context.Context, op string, dv *broker.Delivery, delay time.Duration, failed bool) error {
	if err := d.check(op); err != nil {
		return err
	}
	h, err := handleOf(op, dv)
	if err != nil {
		return err
	}
	if h.dead {
		lost, err := d.deadOp(ctx, "release", h.k, "", "", []*handle{h})
		if err != nil {
			return err
		}
		return lostError(op, lost)
	}
	if h.tm == nil {
		return broker.Invalidf("%s: delivery %s has no decodable message", op, h.id)
	}
	now := time.Now()
	tm := *h.tm
	count := ""
	if failed {
		tm.Retried++
		tm.LastFailedAt = now.Unix()
		count = "1"
	}
	at := ""
	if delay > 0 {
		at = score(now.Add(delay))
	}
	k := h.k
	n, err := nackScript.Run(ctx, d.rdb,
		[]string{k.active, k.lease, k.retry, k.pending, k.notify, k.daily(k.processed, now), k.daily(k.failed, now), k.processed, k.failed, k.olock},
		k.task, h.id, h.tok, tm.encode(), at, now.UnixNano(), now.Add(statsTTL).Unix(), count).Int64()
	if err != nil {
		return classify(op, err, false)
	}
	if n != 1 {
		return broker.LeaseLostError(op, h.id)
	}
	return nil
}

// Extend moves the lease deadlines (asynq's lease zset) to lease from now
// and updates each delivery's LeaseDeadline.
func (d *Driver) Extend(ctx context.Context, ds []*broker.Delivery, lease time.Duration) error {
	if err := d.check("extend"); err != nil {
		return err
	}
	groups, order, err := groupHandles("extend", ds)
	if err != nil {
		return err
	}
	end := time.UnixMilli(time.Now().Add(lease).UnixMilli())
	var lost []string
	for _, g := range order {
		hs := groups[g]
		k := hs[0].k
		var l []string
		if hs[0].dead {
			l, err = d.deadOp(ctx, "extend", k, "", score(end), hs)
		} else {
			argv := []any{k.task, score(end)}
			for _, h := range hs {
				argv = append(argv, h.id, h.tok)
			}
			l, err = extendScript.Run(ctx, d.rdb, []string{k.lease}, argv...).StringSlice()
			err = classify("extend", err, false)
		}
		if err != nil {
			return err
		}
		lost = append(lost, l...)
	}
	lostSet := map[string]bool{}
	for _, id := range lost {
		lostSet[id] = true
	}
	for _, dv := range ds {
		if !lostSet[dv.ID] {
			dv.LeaseDeadline = end
		}
	}
	return lostError("extend", lost)
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

// Stats reads the queue's depths from asynq's keys: Ready = pending plus
// due scheduled/retry tasks, InFlight = active, Delayed = scheduled plus
// retry not yet due, DeadLettered = archived.
func (d *Driver) Stats(ctx context.Context, lane string) (broker.Stats, error) {
	if err := d.check("stats"); err != nil {
		return broker.Stats{}, err
	}
	k := d.keys(lane)
	now := time.Now()
	out, err := statsScript.Run(ctx, d.rdb, []string{k.pending, k.active, k.scheduled, k.retry, k.archived}, k.task, score(now)).Slice()
	if err != nil {
		return broker.Stats{}, classify("stats", err, false)
	}
	if len(out) != 5 {
		return broker.Stats{}, broker.Errorf("stats", broker.Permanent, "stats script returned %d values", len(out))
	}
	s := broker.Stats{Lane: lane}
	s.Ready, _ = out[0].(int64)
	s.InFlight, _ = out[1].(int64)
	s.Delayed, _ = out[2].(int64)
	s.DeadLettered, _ = out[3].(int64)
	if str, ok := out[4].(string); ok {
		if ns, err := strconv.ParseInt(str, 10, 64); err == nil && ns > 0 && s.Ready > 0 {
			if age := now.Sub(time.Unix(0, ns)); age > 0 {
				s.OldestReady = age
			}
		}
	}
	return s, nil
}

// Close stops waiting receives and closes the connections. Leases held are
// not released: those tasks come back after their leases, with a higher
// attempt. It is safe to call twice.
func (d *Driver) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		close(d.done)
		d.notify.close()
		err = d.rdb.Close()
		if errors.Is(err, redis.ErrClosed) {
			err = nil
		}
	})
	return err
}
