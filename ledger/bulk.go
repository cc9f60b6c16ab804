package ledger

// CreateResult is how one task of Ledger.CreateMany fared: exactly one of
// Err and Task is set. With Task, Created says whether this call recorded
// it (false: the task already held its idempotency key or ID, and Task is
// that task).
type CreateResult struct {
	Task    *Task
	Created bool
	Err     error
}
