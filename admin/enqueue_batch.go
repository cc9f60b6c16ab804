package admin

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// MaxBatchTasks is the most tasks one batch (Ops.EnqueueBatch, POST
// /api/v1/tasks:batch) may carry; a larger batch is refused whole.
const MaxBatchTasks = 1000

// BatchResult is how one task of a batch fared: Err, or the task's ID and
// whether it was a duplicate.
type BatchResult struct {
	switchyard.EnqueueResult
	Err error
}

// EnqueueBatch validates and enqueues a batch of tasks with one
// Client.EnqueueMany (one ledger transaction, one broker batch publish),
// under the rules of Enqueue for each: every task needs its own
// idempotency key; the same key with the same request gives the same task
// (Duplicate=true), with another request ErrKeyReused — inside the batch
// too; an invalid task fails alone with an error matching
// broker.ErrInvalid and the others are enqueued. A batch of more than
// MaxBatchTasks tasks is refused whole (broker.ErrInvalid) and nothing is
// enqueued. The error is non-nil only when the batch as a whole failed.
func (o *Ops) EnqueueBatch(ctx context.Context, sc Scope, rs []EnqueueRequest) ([]BatchResult, error) {
	if len(rs) > MaxBatchTasks {
		return nil, broker.Invalidf("a batch of %d tasks is over the limit of %d tasks per batch (admin.MaxBatchTasks): split it", len(rs), MaxBatchTasks)
	}
	out := make([]BatchResult, len(rs))
	type sent struct {
		i   int
		q   request
		key string
		ten string
	}
	var (
		items []switchyard.EnqueueItem
		meta  []sent
	)
	firstOf := map[[2]string]int{} // (tenant, key) → index in meta
	for i, r := range rs {
		if strings.TrimSpace(r.IdempotencyKey) == "" {
			out[i].Err = broker.Invalidf("task %d: idempotency_key is required: the same key always gives the same task", i)
			continue
		}
		args, opts, err := o.enqueueArgs(sc, r)
		if err != nil {
			out[i].Err = err
			continue
		}
		q := requestOf(r, args.args, opts.Lane)
		k := [2]string{opts.Tenant, opts.IdempotencyKey}
		if j, ok := firstOf[k]; ok && meta[j].q.fingerprint() != q.fingerprint() {
			out[i].Err = keyReused(opts.IdempotencyKey, "request (an earlier task of this batch)")
			continue
		}
		if o.cfg.Ledger == nil && !o.keys.check(opts.Tenant, opts.IdempotencyKey, q.fingerprint(), o.now()) {
			out[i].Err = keyReused(opts.IdempotencyKey, "request")
			continue
		}
		if _, ok := firstOf[k]; !ok {
			firstOf[k] = len(meta)
		}
		items = append(items, switchyard.EnqueueItem{Args: args, Opts: opts})
		meta = append(meta, sent{i: i, q: q, key: opts.IdempotencyKey, ten: opts.Tenant})
	}
	if len(items) == 0 {
		return out, nil
	}
	res, err := o.client.EnqueueMany(ctx, items)
	if err != nil {
		return nil, err
	}
	for k, r := range res {
		m := meta[k]
		if r.Err != nil {
			out[m.i].Err = r.Err
			continue
		}
		er := r.EnqueueResult
		if err := o.checkReuse(ctx, m.q, m.ten, m.key, &er); err != nil {
			out[m.i].Err = err
			continue
		}
		out[m.i].EnqueueResult = er
		if rs[m.i].Actor != "" && !er.Duplicate && o.cfg.Ledger != nil {
			if err := o.cfg.Ledger.AppendEvent(ctx, ledger.Event{TaskID: er.ID, At: time.Now(), Reason: "submitted", Actor: rs[m.i].Actor.String()}); err != nil {
				// Enqueued; only its "submitted" event is missing: the task
				// stands (the HTTP API answers 202, as for Enqueue).
				slog.Default().Warn("admin: task enqueued, but its submitted event was not recorded", "id", er.ID, "err", err)
			}
		}
	}
	return out, nil
}

// batchJSON is the body of POST /api/v1/tasks:batch.
type batchJSON struct {
	Tasks []batchItemJSON `json:"tasks"`
}

type batchItemJSON struct {
	ingestJSON
	IdempotencyKey string `json:"idempotency_key"`
}

// batchOutJSON is the answer: one entry per task, in order.
type batchOutJSON struct {
	Accepted int               `json:"accepted"`
	Rejected int               `json:"rejected"`
	Results  []batchResultJSON `json:"results"`
}

type batchResultJSON struct {
	Index     int          `json:"index"`
	Status    int          `json:"status"` // 202, or the 4xx/5xx the task alone would have had
	ID        string       `json:"id,omitempty"`
	State     ledger.State `json:"state,omitempty"`
	Duplicate bool         `json:"duplicate,omitempty"`
	StatusURL string       `json:"status_url,omitempty"`
	Error     string       `json:"error,omitempty"`
}

// enqueueBatch is the batch ingestion endpoint: each task as POST
// /api/v1/tasks would take it, with its key in idempotency_key; 200 with a
// result per task (202 or the task's own 4xx), or 400 for the batch as a
// whole (not JSON, empty, over MaxBatchTasks).
func (h *handler) enqueueBatch(r *http.Request, c *call) (int, any, error) {
	var body batchJSON
	if err := decodeBody(r, &body, false); err != nil {
		return 0, nil, err
	}
	if len(body.Tasks) == 0 {
		return 0, nil, badRequest("the batch has no tasks: send {\"tasks\": [...]}")
	}
	if len(body.Tasks) > MaxBatchTasks {
		return 0, nil, badRequest("a batch of %d tasks is over the limit of %d tasks per batch (admin.MaxBatchTasks): split it", len(body.Tasks), MaxBatchTasks)
	}
	reqs := make([]EnqueueRequest, len(body.Tasks))
	pre := make([]error, len(body.Tasks))
	for i, it := range body.Tasks {
		req := it.EnqueueRequest
		if it.DelayMS != nil {
			switch {
			case req.Delay != "":
				pre[i] = badRequest("task %d: give delay or delay_ms, not both", i)
			case *it.DelayMS < 0:
				pre[i] = badRequest("task %d: delay_ms must not be negative", i)
			case *it.DelayMS > int64(math.MaxInt64/time.Millisecond):
				pre[i] = badRequest("task %d: delay_ms is too large: it runs past the supported range (until %d-12-31 UTC)", i, broker.MaxYear)
			default:
				req.Delay = (time.Duration(*it.DelayMS) * time.Millisecond).String()
			}
		}
		req.IdempotencyKey = strings.TrimSpace(it.IdempotencyKey)
		req.Actor = c.who
		reqs[i] = req
	}
	// Tasks refused before Ops sees them are left out of its call.
	var send []EnqueueRequest
	var idx []int
	for i := range reqs {
		if pre[i] == nil {
			send, idx = append(send, reqs[i]), append(idx, i)
		}
	}
	res, err := h.ops.EnqueueBatch(r.Context(), c.scope, send)
	if err != nil {
		return 0, nil, err
	}
	all := make([]BatchResult, len(reqs))
	for i := range pre {
		all[i].Err = pre[i]
	}
	for k, i := range idx {
		all[i] = res[k]
	}
	out := batchOutJSON{Results: make([]batchResultJSON, len(all))}
	for i, br := range all {
		jr := batchResultJSON{Index: i}
		if br.Err != nil {
			jr.Status, jr.Error = h.errorStatus(r, br.Err)
			out.Rejected++
		} else {
			jr.Status, jr.ID, jr.Duplicate = http.StatusAccepted, br.ID, br.Duplicate
			jr.StatusURL = batchStatusURL(r, br.ID)
			if !br.Duplicate {
				jr.State = ledger.Queued
			}
			out.Accepted++
		}
		out.Results[i] = jr
	}
	c.note(slog.Int("batch", len(all)), slog.Int("accepted", out.Accepted), slog.Int("rejected", out.Rejected))
	return http.StatusOK, out, nil
}

// batchStatusURL is a task's status URL from the batch route's path
// (…/tasks:batch → …/tasks/{id}/status).
func batchStatusURL(r *http.Request, id string) string {
	u := statusURL(r, id) // …/tasks:batch/{id}/status
	return strings.Replace(u, "/tasks:batch/", "/tasks/", 1)
}
