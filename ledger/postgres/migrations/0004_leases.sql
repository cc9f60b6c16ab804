-- 0004: the ledger lease of a running attempt (NULL for none), by the
-- database's clock. BeginRun takes a running task over only once it has
-- passed.
ALTER TABLE ledger_tasks ADD COLUMN lease_until timestamptz;
