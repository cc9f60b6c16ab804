package providerbatch

import (
	"context"
	"encoding/json"
	"time"

	"github.com/switchyard-dev/switchyard/spend"
)

// ItemState is where one task's request is.
type ItemState string

const (
	// Pending: waiting to be put in a batch.
	Pending ItemState = "pending"
	// Batched: in a submitted (or submitting) provider batch.
	Batched ItemState = "batched"
	// DirectCall: taken out of batching; the task calls the provider
	// itself.
	DirectCall ItemState = "direct"
	// Done: the result is stored; the task returns it.
	Done ItemState = "done"
	// FailedItem: the request failed for good; the task dead-letters with
	// Err as its reason.
	FailedItem ItemState = "failed"
)

// StoredItem is one task's request and outcome, as the Store keeps it.
type StoredItem struct {
	TaskID   string
	Provider string
	Model    string
	Tenant   string
	Kind     string
	Run      string
	CacheKey string
	Params   json.RawMessage
	State    ItemState
	// Batch is the local ID of the batch holding the item (Batched).
	Batch     string
	Attempts  int
	CreatedAt time.Time
	Result    json.RawMessage
	Usage     spend.Usage
	Cost      spend.Micros
	Mode      spend.Mode
	Err       string
}

// BatchState is a batch's local state.
type BatchState string

const (
	// Submitting: items claimed, the provider call under way (or
	// interrupted by a crash: see Finder).
	Submitting BatchState = "submitting"
	// Submitted: the provider's batch ID is recorded; polled.
	Submitted BatchState = "submitted"
	// Closed: results collected.
	Closed BatchState = "closed"
)

// Batch is a batch as the Store keeps it.
type Batch struct {
	LocalID    string
	Provider   string
	ProviderID string
	State      BatchState
	Items      int
	CreatedAt  time.Time
	NextPoll   time.Time
}

// Outcome settles one item of a batch (FinishBatch) or a direct call
// (Settle). State is Done, FailedItem, or Pending to put the item back for
// a later batch (its attempt counted).
type Outcome struct {
	TaskID string
	State  ItemState
	Result json.RawMessage
	Usage  spend.Usage
	Cost   spend.Micros
	Err    string
}

// Reservation is the spend a new item reserves under its tenant's windows.
type Reservation struct {
	Estimate spend.Micros
	Mode     spend.Mode
	Windows  []spend.Window
	Now      time.Time
}

// Store keeps items, batches and spend durably. providerbatch/sqlstore
// implements it on the ledger's SQLite or PostgreSQL database (migration
// 0013). Every method is one transaction.
type Store interface {
	// Add records it (State Pending or DirectCall) and reserves r.Estimate
	// on its tenant's spend, unless the task already has an item, which is
	// then returned unchanged. When a window of r would be crossed nothing
	// is written and the error is a *spend.CapError.
	Add(ctx context.Context, it StoredItem, r Reservation) (*StoredItem, error)
	// Item returns the task's item, or nil when it has none.
	Item(ctx context.Context, taskID string) (*StoredItem, error)
	// TakeDirect moves a Pending item to DirectCall and its reservation
	// to direct mode at r.Estimate (checking r.Windows); false when it was no longer pending.
	TakeDirect(ctx context.Context, taskID string, r Reservation) (bool, error)
	// Settle records a direct call's outcome and settles its spend.
	Settle(ctx context.Context, o Outcome, now time.Time) error
	// Lease takes (or renews) the pump lease of provider for holder until
	// until; false when another holder's lease is live at now.
	Lease(ctx context.Context, provider, holder string, now, until time.Time) (bool, error)
	// PendingStats counts provider's pending items and the enqueue time
	// of the oldest.
	PendingStats(ctx context.Context, provider string) (int, time.Time, error)
	// Claim creates batch localID (Submitting) holding up to max pending
	// items of provider, oldest first, then ordered by cache key so that
	// items sharing a prefix sit together; it returns them in that order.
	Claim(ctx context.Context, provider, localID string, max int, now time.Time) ([]StoredItem, error)
	// Submitted records the provider's batch ID of localID; an error when
	// localID is no longer Submitting (released meanwhile).
	Submitted(ctx context.Context, localID, providerID string, nextPoll time.Time) error
	// Release deletes batch localID and puts its items back to pending.
	Release(ctx context.Context, localID string) error
	// Open lists provider's batches not yet Closed.
	Open(ctx context.Context, provider string) ([]Batch, error)
	// BatchItems lists the items of batch localID.
	BatchItems(ctx context.Context, localID string) ([]StoredItem, error)
	// Poll sets when batch localID is next polled.
	Poll(ctx context.Context, localID string, next time.Time) error
	// Finish applies the outcomes of batch localID's items, settles their
	// spend and closes it.
	Finish(ctx context.Context, localID string, outcomes []Outcome, now time.Time) error
}
