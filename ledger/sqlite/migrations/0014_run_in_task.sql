-- 0014: a run's start is kept in the task row (run_attempt, run_worker,
-- run_start: the last BeginRun's), as the PostgreSQL store does since its
-- migration 0012, and its attempt row is written once, when the run ends
-- (EndRun, FinishAttempt), instead of at both ends. Attempts shows a
-- running attempt that has no row yet from these columns. Tasks from
-- before have NULL there, and every attempt they started already has its
-- row, so no existing data is rewritten (ADD COLUMN rewrites nothing).
ALTER TABLE ledger_tasks ADD COLUMN run_attempt INTEGER;
ALTER TABLE ledger_tasks ADD COLUMN run_worker TEXT;
ALTER TABLE ledger_tasks ADD COLUMN run_start INTEGER;
