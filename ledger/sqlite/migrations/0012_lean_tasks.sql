-- 0012: leaner task rows (issue 15). Moving a task (state, updated_at)
-- no longer rewrites an index entry: ledger_tasks_state_updated
-- (state, updated_at) is replaced by an index on created_at, which never
-- changes; Prune finds the tasks it may delete among those created before
-- its horizon (a task updated before it was created before it too).
-- A task's "enqueued" event (seq 1) is no longer written as a row: it is
-- derived from the task (created queued at created_at, by no actor). The
-- rows written before stay, and nothing is derived for those tasks, so no
-- existing data is rewritten.
DROP INDEX ledger_tasks_state_updated;
CREATE INDEX ledger_tasks_created ON ledger_tasks (created_at);
