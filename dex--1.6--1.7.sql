/*
 * dex 1.6 -> 1.7: ALTER EXTENSION dex UPDATE TO '1.7'.
 *
 * test/t/009_upgrade.pl checks that an updated database has exactly the
 * objects of a fresh 1.7 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.7'" to load this file. \quit

/* ---- Flow control: rate limits and concurrency limits (1.7) ---- */
-- dex.alter_queue gains the limits of flow control: a new signature (the old
-- calls, by position or by name, keep working)
DROP FUNCTION dex.alter_queue(text, integer, boolean);
CREATE FUNCTION dex.alter_queue(name text, capacity integer DEFAULT NULL, paused boolean DEFAULT NULL,
                                rate_limit integer DEFAULT NULL, rate_period interval DEFAULT NULL,
                                concurrency_limit integer DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_alter_queue';
COMMENT ON FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer) IS
    'Change a queue at run time: its capacity (most tasks leased at once; 0 removes the limit), whether it is paused (polls hand out nothing), its rate limit (most tasks handed out per rate_period, 1 second unless given; 0 removes it) and the concurrency limit of its keys (runs of a key active at once); NULL leaves a setting as it is.';
ALTER FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer) SECURITY DEFINER;
REVOKE ALL ON FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer) TO dex_admin;

/*
 * Rate limits: a queue with rate_limit n and rate_period p hands out at most
 * n tasks at once and then n per p, across every worker and backend.  The
 * limit is kept here; its token bucket lives in shared memory
 * (src/shmem/rate.c): polls write no table.  dex.alter_queue sets it.
 *
 * Concurrency limits: a concurrency key admits up to n runs at once, n the
 * key's own limit (dex.concurrency_limit, dex.set_concurrency_limit) or else
 * its queue's concurrency_limit (1 by default: one run at a time).  Each
 * admitted run holds a numbered slot of its key (dex.concurrency_slot.slot,
 * 0 to n - 1; src/engine/keys.c).
 */
ALTER TABLE dex.queue
    ADD COLUMN rate_limit integer CHECK (rate_limit BETWEEN 1 AND 1000000),
    ADD COLUMN rate_period interval CHECK (rate_period BETWEEN interval '1 millisecond' AND interval '1 day'),
    ADD COLUMN concurrency_limit integer NOT NULL DEFAULT 1 CHECK (concurrency_limit BETWEEN 1 AND 1000),
    ADD CONSTRAINT queue_rate_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL));
COMMENT ON COLUMN dex.queue.rate_limit IS
    'Most tasks handed out per rate_period (a token bucket in shared memory); NULL: no rate limit.';
COMMENT ON COLUMN dex.queue.concurrency_limit IS
    'Most runs of one concurrency key active at once, for keys without a limit of their own (dex.concurrency_limit).';

ALTER TABLE dex.concurrency_slot
    ADD COLUMN slot integer NOT NULL DEFAULT 0,
    DROP CONSTRAINT concurrency_slot_pkey,
    ADD PRIMARY KEY (queue_id, key, slot);
COMMENT ON COLUMN dex.concurrency_slot.slot IS
    'Which of the key''s slots the run holds: 0 to its concurrency limit - 1.';

CREATE TABLE dex.concurrency_limit (
    queue_id    integer NOT NULL,
    key         text NOT NULL,
    max_runs    integer NOT NULL CHECK (max_runs BETWEEN 1 AND 1000),
    PRIMARY KEY (queue_id, key)
);
COMMENT ON TABLE dex.concurrency_limit IS
    'Concurrency keys with a limit of their own: most runs of the key active at once on its workflow queue.';
SELECT pg_catalog.pg_extension_config_dump('dex.concurrency_limit', '');

CREATE FUNCTION dex.set_concurrency_limit(queue text, key text, max_runs integer)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_set_concurrency_limit';
COMMENT ON FUNCTION dex.set_concurrency_limit(text, text, integer) IS
    'Let up to max_runs runs of a concurrency key of a workflow queue be active at once (1 to 1000); NULL gives the key its queue''s concurrency_limit back. Raised, it admits waiting runs at once; lowered, the runs above it finish first.';
ALTER FUNCTION dex.set_concurrency_limit(text, text, integer) SECURITY DEFINER;
REVOKE ALL ON FUNCTION dex.set_concurrency_limit(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.set_concurrency_limit(text, text, integer) TO dex_admin;

CREATE FUNCTION dex.rate_limits(
    OUT datid oid, OUT queue_id integer, OUT rate_limit integer, OUT rate_period interval,
    OUT tokens double precision, OUT tasks_granted bigint, OUT polls_throttled bigint,
    OUT next_token_at timestamptz)
RETURNS SETOF record
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_rate_limits';
COMMENT ON FUNCTION dex.rate_limits() IS
    'The token buckets of rate-limited queues in shared memory, of every database: the limit they enforce, the tokens they hold now, the tasks they let polls lease and the polls they cut short since they were made (a bucket is made full by the first poll after the server starts or the limit is set), and when the next token comes (NULL: one is there). Empty if dex is not preloaded.';
REVOKE ALL ON FUNCTION dex.rate_limits() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.rate_limits() TO pg_monitor, dex_admin;

CREATE VIEW dex.queue_limits AS
SELECT q.name AS queue,
       q.kind,
       q.capacity,
       q.rate_limit,
       q.rate_period,
       b.tokens,
       b.next_token_at,
       coalesce(b.tasks_granted, 0) AS tasks_granted,
       coalesce(b.polls_throttled, 0) AS polls_throttled,
       q.concurrency_limit,
       (SELECT pg_catalog.count(*) FROM dex.concurrency_limit l
         WHERE l.queue_id OPERATOR(pg_catalog.=) q.id) AS keys_with_limits
  FROM dex.queue q
  LEFT JOIN dex.rate_limits() b
    ON b.datid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                        WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
   AND b.queue_id OPERATOR(pg_catalog.=) q.id
   AND q.rate_limit IS NOT NULL;
COMMENT ON VIEW dex.queue_limits IS
    'The flow control of each queue: capacity, rate limit (tasks per period) with its bucket now (tokens NULL: no poll made it yet, it is full), tasks it let through and polls it cut short, and the concurrency limit of its keys with how many keys have their own.';

CREATE VIEW dex.concurrency_limits AS
SELECT q.name AS queue,
       l.key,
       l.max_runs,
       (SELECT pg_catalog.count(*) FROM dex.concurrency_slot s
         WHERE s.queue_id OPERATOR(pg_catalog.=) l.queue_id AND s.key OPERATOR(pg_catalog.=) l.key) AS active,
       (SELECT pg_catalog.count(*) FROM dex.concurrency_wait w
         WHERE w.queue_id OPERATOR(pg_catalog.=) l.queue_id AND w.key OPERATOR(pg_catalog.=) l.key) AS waiting
  FROM dex.concurrency_limit l
  JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) l.queue_id;
COMMENT ON VIEW dex.concurrency_limits IS
    'Concurrency keys with a limit of their own: the limit, the runs of the key active now (holding a slot) and those waiting.';
GRANT SELECT ON dex.queue_limits, dex.concurrency_limits TO dex_admin;
GRANT SELECT ON dex.queue_limits TO pg_monitor;
