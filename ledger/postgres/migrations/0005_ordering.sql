-- 0005: the ordering Sequencer (broker.Sequencer) shared by every process
-- of the ledger. One row per (lane, ordering key): the last number handed
-- out, the number whose turn it is, the number holding the key and until
-- when, when the key last moved, and whether the number whose turn it is
-- has started. Numbers that finished out of turn wait in ledger_order_done
-- until their turn comes.
CREATE TABLE ledger_order_keys (
	lane       text        NOT NULL,
	okey       text        NOT NULL,
	assigned   bigint      NOT NULL,
	next_start bigint      NOT NULL,
	running    bigint      NOT NULL DEFAULT 0,
	until      timestamptz NOT NULL DEFAULT 'epoch',
	progress   timestamptz NOT NULL,
	started    boolean     NOT NULL DEFAULT false,
	PRIMARY KEY (lane, okey)
);

CREATE TABLE ledger_order_done (
	lane text   NOT NULL,
	okey text   NOT NULL,
	seq  bigint NOT NULL,
	PRIMARY KEY (lane, okey, seq)
);
