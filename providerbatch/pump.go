package providerbatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/spend"
)

// maxSubmitsPerPump bounds the batches one pump submits.
const maxSubmitsPerPump = 16

// Pump does the batch lane's periodic work once, if no other process holds
// the provider's pump lease: it polls the open batches that are due,
// collects the results of ended ones, and submits pending items as batches
// of MaxItems (or fewer, once the oldest has waited MaxAge). Do calls it;
// it is exported for a process that wants to drive batches on its own
// schedule.
func (b *Batcher) Pump(ctx context.Context) error {
	// One pump at a time in this process (its goroutines share the lease
	// holder); others skip, the running one does the work.
	if !b.pumping.TryLock() {
		return nil
	}
	defer b.pumping.Unlock()
	p := b.cfg.Provider.Name()
	now := b.cfg.Now()
	ok, err := b.cfg.Store.Lease(ctx, p, b.holder, now, now.Add(b.cfg.LeaseTTL))
	if err != nil || !ok {
		return err
	}
	// Release the lease when done so that the next due task pumps at once.
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = b.cfg.Store.Lease(rctx, p, b.holder, b.cfg.Now(), b.cfg.Now())
	}()
	var errs []error
	open, err := b.cfg.Store.Open(ctx, p)
	if err != nil {
		return err
	}
	for _, bt := range open {
		if err := b.advance(ctx, bt); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, fmt.Errorf("batch %s: %w", bt.LocalID, err))
		}
	}
	for range maxSubmitsPerPump {
		now = b.cfg.Now()
		b.mu.Lock()
		throttled := now.Before(b.throttled)
		b.mu.Unlock()
		if throttled {
			break
		}
		n, oldest, err := b.cfg.Store.PendingStats(ctx, p)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if n == 0 || (n < b.cfg.MaxItems && now.Sub(oldest) < b.cfg.MaxAge) {
			break
		}
		if err := b.submit(ctx, now); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return errors.Join(errs...)
}

func (b *Batcher) submit(ctx context.Context, now time.Time) error {
	p := b.cfg.Provider.Name()
	local := newID("lb")
	items, err := b.cfg.Store.Claim(ctx, p, local, b.cfg.MaxItems, now)
	if err != nil || len(items) == 0 {
		return err
	}
	req := make([]Item, len(items))
	for i, it := range items {
		req[i] = Item{CustomID: it.TaskID, Model: it.Model, Params: it.Params}
	}
	cctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	id, err := b.cfg.Provider.Submit(cctx, local, req)
	cancel()
	if err != nil {
		var se *SubmitError
		if errors.As(err, &se) && se.NotCreated {
			b.cfg.Metrics.batch("refused")
			if se.RetryAfter > 0 {
				b.mu.Lock()
				b.throttled = b.cfg.Now().Add(se.RetryAfter)
				b.mu.Unlock()
			}
			if rerr := b.cfg.Store.Release(ctx, local); rerr != nil {
				return errors.Join(err, rerr)
			}
			return err
		}
		// Unknown outcome: the batch stays Submitting; the next pump finds
		// it (Finder) or releases it.
		b.cfg.Metrics.batch("unknown")
		return err
	}
	b.cfg.Metrics.batch("submitted")
	return b.cfg.Store.Submitted(ctx, local, id, b.cfg.Now().Add(b.cfg.PollInterval))
}

// advance moves one open batch on: recovers an interrupted submit, polls a
// due one, collects an ended one.
func (b *Batcher) advance(ctx context.Context, bt Batch) error {
	now := b.cfg.Now()
	if bt.State == Submitting {
		// A submit interrupted by a crash (or of unknown outcome). The
		// submitter's call is bounded by CallTimeout from the claim; wait
		// that plus a lease's length (clock skew, a paused process) before
		// deciding that it is over.
		if now.Sub(bt.CreatedAt) < b.cfg.CallTimeout+b.cfg.LeaseTTL {
			return nil
		}
		if f, ok := b.cfg.Provider.(Finder); ok {
			id, found, err := f.Find(ctx, bt.LocalID, bt.CreatedAt.Add(-time.Minute))
			if err != nil {
				return err
			}
			if found {
				b.cfg.Metrics.batch("recovered")
				return b.cfg.Store.Submitted(ctx, bt.LocalID, id, now)
			}
		}
		// Not found (or the provider cannot say): the items go back to
		// pending. Without a Finder this may submit them twice; see the
		// package documentation.
		b.cfg.Metrics.batch("released")
		return b.cfg.Store.Release(ctx, bt.LocalID)
	}
	if now.Before(bt.NextPoll) {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	st, err := b.cfg.Provider.Poll(cctx, bt.ProviderID)
	cancel()
	if err != nil {
		_ = b.cfg.Store.Poll(ctx, bt.LocalID, now.Add(b.cfg.PollInterval))
		return fmt.Errorf("poll %s: %w", bt.ProviderID, err)
	}
	if st.State == Running {
		return b.cfg.Store.Poll(ctx, bt.LocalID, now.Add(b.cfg.PollInterval))
	}
	return b.collect(ctx, bt, st)
}

// collect settles every item of an ended batch: its result, its error (a
// retryable one puts only that item back), or its absence (an expired or
// cancelled batch's unfinished items go back; one missing from an ended
// batch's results goes back with the reason, then fails).
func (b *Batcher) collect(ctx context.Context, bt Batch, st Status) error {
	var results []Result
	if st.State != Failed {
		cctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
		var err error
		results, err = b.cfg.Provider.Results(cctx, bt.ProviderID)
		cancel()
		if err != nil {
			_ = b.cfg.Store.Poll(ctx, bt.LocalID, b.cfg.Now().Add(b.cfg.PollInterval))
			return fmt.Errorf("results of %s: %w", bt.ProviderID, err)
		}
	}
	byID := make(map[string]Result, len(results))
	for _, r := range results {
		byID[r.CustomID] = r
	}
	items, err := b.cfg.Store.BatchItems(ctx, bt.LocalID)
	if err != nil {
		return err
	}
	outs := make([]Outcome, 0, len(items))
	for i := range items {
		it := &items[i]
		r, ok := byID[it.TaskID]
		var o Outcome
		switch {
		case ok && r.Err == nil && r.Usage.Validate() != nil:
			o = b.retry(it, &ItemError{Code: "malformed", Message: r.Usage.Validate().Error()})
		case ok && r.Err == nil:
			price, perr := b.cfg.Prices.Price(it.Provider, it.Model)
			if perr != nil {
				o = Outcome{TaskID: it.TaskID, State: FailedItem, Err: perr.Error()}
				break
			}
			cost := price.Cost(r.Usage, spend.Batch)
			o = Outcome{TaskID: it.TaskID, State: Done, Result: r.Body, Usage: r.Usage, Cost: cost}
			b.cfg.Metrics.settled(it, r.Usage, cost, spend.Batch)
		case ok:
			o = b.retry(it, r.Err)
		case st.State == Failed:
			o = b.retry(it, &ItemError{Code: "batch_failed", Message: st.Err, Retryable: false})
		case st.State == Expired || st.State == Cancelled:
			o = b.retry(it, &ItemError{Code: string(st.State), Message: "batch " + string(st.State) + " before the item finished", Retryable: true})
		default:
			o = b.retry(it, &ItemError{Code: "missing", Message: "results file of batch " + bt.ProviderID + " has no line for the item", Retryable: true})
		}
		outs = append(outs, o)
		b.cfg.Metrics.item(string(o.State))
	}
	b.cfg.Metrics.batch(string(st.State))
	return b.cfg.Store.Finish(ctx, bt.LocalID, outs, b.cfg.Now())
}

// retry puts it back for another batch when e is retryable and attempts
// remain, else fails it with e as the reason.
func (b *Batcher) retry(it *StoredItem, e *ItemError) Outcome {
	if e.Retryable && it.Attempts+1 < b.cfg.MaxItemAttempts {
		return Outcome{TaskID: it.TaskID, State: Pending, Err: e.Error()}
	}
	why := e.Error()
	if e.Retryable {
		why = fmt.Sprintf("%s (after %d batches)", why, it.Attempts+1)
	}
	return Outcome{TaskID: it.TaskID, State: FailedItem, Err: why}
}
