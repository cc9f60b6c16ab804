-- 0004: the ledger lease of a running attempt (Unix nanoseconds; NULL for
-- none). BeginRun takes a running task over only once it has passed.
ALTER TABLE ledger_tasks ADD COLUMN lease_until INTEGER;
