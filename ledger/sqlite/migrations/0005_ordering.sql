-- 0005: the ordering Sequencer (broker.Sequencer) shared by every process
-- of the ledger. One row per (lane, ordering key): the last number handed
-- out, the number whose turn it is, the number holding the key and until
-- when (Unix nanoseconds), when the key last moved, and whether the number
-- whose turn it is has started. Numbers that finished out of turn wait in
-- ledger_order_done until their turn comes.
CREATE TABLE ledger_order_keys (
	lane       TEXT    NOT NULL,
	okey       TEXT    NOT NULL,
	assigned   INTEGER NOT NULL,
	next_start INTEGER NOT NULL,
	running    INTEGER NOT NULL DEFAULT 0,
	until      INTEGER NOT NULL DEFAULT 0,
	progress   INTEGER NOT NULL,
	started    INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (lane, okey)
) WITHOUT ROWID;

CREATE TABLE ledger_order_done (
	lane TEXT    NOT NULL,
	okey TEXT    NOT NULL,
	seq  INTEGER NOT NULL,
	PRIMARY KEY (lane, okey, seq)
) WITHOUT ROWID;
