package postgres

// queries are the driver's statements with the schema filled in. Times of
// visibility come from the server's clock (statement_timestamp()), so
// that processes whose clocks differ agree on leases; run_at and
// enqueued_at are kept as the publisher's Unix nanoseconds, so that they
// round-trip exactly.
type queries struct {
	insert, lockKeys, dedup, dedupRead, dedupExpire string

	receive, receiveDead, nextDue                    string
	ack, ackDead, nack, nackErr, release, extend     string
	extendDead, releaseDead                          string
	toDead, replay, stats, lanes, browse, browseDead string
}

// The columns a receive returns, in decodeRow's order.
const rowCols = `q.seq, q.id, q.kind, q.body, q.headers, q.tenant, q.idem_key, q.ord_key, q.run_at, q.enqueued_at, q.max_attempts, q.attempts`

func newQueries(schema string) queries {
	f := func(q string) string { return sqlFor(schema, q) }
	return queries{
		// One statement per batch: the arrays are unnested in order, so
		// seq follows the batch order. It notifies each lane once.
		insert: f(`WITH ins AS (
	INSERT INTO {s}.sy_queue (lane, visible_at, id, kind, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, headers, body)
	SELECT m.lane, CASE WHEN m.run_at > 0 THEN greatest(statement_timestamp(), to_timestamp(m.run_at / 1e9::float8)) ELSE statement_timestamp() END,
		m.id, m.kind, m.tenant, m.idem_key, m.ord_key, m.run_at, m.enqueued_at, m.max_attempts, m.headers, m.body
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::integer[], $10::bytea[], $11::bytea[])
		WITH ORDINALITY AS m(lane, id, kind, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, headers, body, n)
	ORDER BY m.n
	RETURNING lane)
SELECT count(*) FROM (SELECT pg_notify($12, l) FROM (SELECT DISTINCT lane AS l FROM ins) x) y`),
		// Publishers of one ordering key take its lock in key order, so
		// that seq order is commit order within a key.
		lockKeys: `SELECT count(*) FROM (SELECT pg_advisory_xact_lock(k) FROM (SELECT DISTINCT hashtextextended(x, 0) AS k FROM unnest($1::text[]) AS x ORDER BY 1) s) t`,
		// A claim replaces only an expired one; it returns the claimed ID
		// and whether it is this message's.
		dedup: f(`WITH ins AS (
	INSERT INTO {s}.sy_dedup AS d (lane, tenant, key, id, expires_at)
	VALUES ($1, $2, $3, $4, statement_timestamp() + $5 * interval '1 microsecond')
	ON CONFLICT (lane, tenant, key) DO UPDATE SET id = EXCLUDED.id, expires_at = EXCLUDED.expires_at
		WHERE d.expires_at < statement_timestamp()
	RETURNING id)
SELECT id, true FROM ins
UNION ALL
SELECT id, false FROM {s}.sy_dedup WHERE lane = $1 AND tenant = $2 AND key = $3 AND NOT EXISTS (SELECT 1 FROM ins)`),
		dedupRead:   f(`SELECT id FROM {s}.sy_dedup WHERE lane = $1 AND tenant = $2 AND key = $3`),
		dedupExpire: f(`DELETE FROM {s}.sy_dedup WHERE expires_at < statement_timestamp()`),

		// Leasing: the oldest visible rows of the lane, skipping rows other
		// receivers are locking; a keyed row only when no earlier row of
		// its key is still in the queue (leased, delayed or ready).
		receive: f(`WITH c AS (
	SELECT m.seq, m.visible_at FROM {s}.sy_queue m
	WHERE m.lane = $1 AND m.visible_at <= statement_timestamp()
	  AND (m.ord_key = '' OR NOT EXISTS (
		SELECT 1 FROM {s}.sy_queue p WHERE p.lane = m.lane AND p.ord_key = m.ord_key AND p.seq < m.seq))
	ORDER BY m.visible_at, m.seq
	LIMIT $2
	FOR UPDATE OF m SKIP LOCKED)
UPDATE {s}.sy_queue q SET attempts = least(q.attempts, 2147483646) + 1, lease_token = $3,
	visible_at = statement_timestamp() + $4 * interval '1 microsecond'
FROM c WHERE q.seq = c.seq
RETURNING ` + rowCols + `, c.visible_at`),
		receiveDead: f(`WITH c AS (
	SELECT m.seq, m.visible_at FROM {s}.sy_dead m
	WHERE m.lane = $1 AND m.visible_at <= statement_timestamp()
	ORDER BY m.seq
	LIMIT $2
	FOR UPDATE OF m SKIP LOCKED)
UPDATE {s}.sy_dead q SET lease_token = $3, visible_at = statement_timestamp() + $4 * interval '1 microsecond'
FROM c WHERE q.seq = c.seq
RETURNING ` + rowCols + `, c.visible_at, q.dead_letter`),
		// How long until the lane's next row becomes visible (a run-at, a
		// nack delay, a lease's end); -1 when none is pending.
		nextDue: f(`SELECT coalesce(extract(epoch FROM min(visible_at) - statement_timestamp()), -1)::float8
FROM {s}.sy_queue WHERE lane = $1 AND visible_at > statement_timestamp()`),

		ack:         f(`DELETE FROM {s}.sy_queue q USING unnest($1::bigint[], $2::bigint[]) AS a(seq, token) WHERE q.seq = a.seq AND q.lease_token = a.token RETURNING q.seq, q.lane, q.ord_key`),
		ackDead:     f(`DELETE FROM {s}.sy_dead q USING unnest($1::bigint[], $2::bigint[]) AS a(seq, token) WHERE q.seq = a.seq AND q.lease_token = a.token RETURNING q.seq, q.lane, q.ord_key`),
		nack:        f(`UPDATE {s}.sy_queue SET visible_at = statement_timestamp() + $3 * interval '1 microsecond', lease_token = 0 WHERE seq = $1 AND lease_token = $2`),
		nackErr:     f(`UPDATE {s}.sy_queue SET visible_at = statement_timestamp() + $3 * interval '1 microsecond', lease_token = 0, last_error = $4 WHERE seq = $1 AND lease_token = $2`),
		release:     f(`UPDATE {s}.sy_queue SET visible_at = statement_timestamp() + $3 * interval '1 microsecond', lease_token = 0, attempts = greatest(attempts - 1, 0) WHERE seq = $1 AND lease_token = $2`),
		releaseDead: f(`UPDATE {s}.sy_dead SET visible_at = statement_timestamp() + $3 * interval '1 microsecond', lease_token = 0 WHERE seq = $1 AND lease_token = $2`),
		extend:      f(`UPDATE {s}.sy_queue q SET visible_at = statement_timestamp() + $3 * interval '1 microsecond' FROM unnest($1::bigint[], $2::bigint[]) AS a(seq, token) WHERE q.seq = a.seq AND q.lease_token = a.token RETURNING q.seq`),
		extendDead:  f(`UPDATE {s}.sy_dead q SET visible_at = statement_timestamp() + $3 * interval '1 microsecond' FROM unnest($1::bigint[], $2::bigint[]) AS a(seq, token) WHERE q.seq = a.seq AND q.lease_token = a.token RETURNING q.seq`),
		toDead: f(`WITH m AS (DELETE FROM {s}.sy_queue WHERE seq = $1 AND lease_token = $2 RETURNING *)
INSERT INTO {s}.sy_dead (lane, visible_at, attempts, id, kind, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, headers, body, dead_letter, dead_at)
SELECT lane, statement_timestamp(), attempts, id, kind, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, headers, body, $3, statement_timestamp() FROM m
RETURNING lane, ord_key`),
		replay: f(`WITH m AS (DELETE FROM {s}.sy_dead WHERE seq = $1 AND lease_token = $2 RETURNING *)
INSERT INTO {s}.sy_queue (lane, visible_at, id, kind, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, headers, body)
SELECT lane, CASE WHEN run_at > 0 THEN greatest(statement_timestamp(), to_timestamp(run_at / 1e9::float8)) ELSE statement_timestamp() END,
	id, kind, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, headers, body FROM m
RETURNING lane`),
		stats: f(`SELECT
	count(*) FILTER (WHERE visible_at <= statement_timestamp()),
	count(*) FILTER (WHERE visible_at > statement_timestamp() AND lease_token <> 0),
	count(*) FILTER (WHERE visible_at > statement_timestamp() AND lease_token = 0),
	coalesce(extract(epoch FROM statement_timestamp() - min(visible_at) FILTER (WHERE visible_at <= statement_timestamp())), 0)::float8,
	(SELECT count(*) FROM {s}.sy_dead WHERE lane = $1)
FROM {s}.sy_queue WHERE lane = $1`),
		lanes: f(`SELECT lane FROM (SELECT DISTINCT lane FROM {s}.sy_queue UNION SELECT DISTINCT lane FROM {s}.sy_dead) l ORDER BY lane`),
		browse: f(`SELECT ` + rowCols + `, q.visible_at, NULL::bytea FROM {s}.sy_queue q
WHERE q.lane = $1 AND q.visible_at <= statement_timestamp() AND (q.visible_at, q.seq) > ($2, $3)
ORDER BY q.visible_at, q.seq LIMIT $4`),
		browseDead: f(`SELECT ` + rowCols + `, q.visible_at, q.dead_letter FROM {s}.sy_dead q
WHERE q.lane = $1 AND q.seq > $2
ORDER BY q.seq LIMIT $3`),
	}
}
