-- 0012: leaner task rows (issue 15). A task's updates (state, attempt,
-- lease, updated_at, event counter) touch no indexed column any more, so
-- PostgreSQL can make them HOT (heap-only: no new index entries) when the
-- page has room, which fillfactor 70 leaves on every new page:
--   - ledger_tasks_state_updated (state, updated_at) is replaced by an
--     index on created_at, which never changes: Prune finds the tasks it
--     may delete among those created before its horizon (a task updated
--     before it was created before it too).
-- A task's "enqueued" event (seq 1) is no longer written as a row: it is
-- derived from the task (created queued at created_at, by no actor). The
-- rows written before stay, and nothing is derived for those tasks, so no
-- existing data is rewritten.
DROP INDEX ledger_tasks_state_updated;
CREATE INDEX ledger_tasks_created ON ledger_tasks (created_at);
ALTER TABLE ledger_tasks SET (fillfactor = 70);

-- A run's start is recorded in the task row (run_attempt, run_worker,
-- run_start: the last BeginRun's), and its attempt row is written once,
-- when it ends, instead of at both ends. Attempts shows a running attempt
-- without a row from these columns. Tasks from before have NULL there and
-- every attempt they started already has its row.
ALTER TABLE ledger_tasks ADD COLUMN run_attempt integer, ADD COLUMN run_worker text, ADD COLUMN run_start timestamptz;

-- ledger_events has no foreign key any more: every event is inserted by a
-- statement that updates (and so locks) its task row, so no event can
-- outlive its task, and Prune deletes a task's events with it. The check
-- was a query per event.
ALTER TABLE ledger_events DROP CONSTRAINT ledger_events_task_id_fkey;
