/*
 * dex 1.6 -> 1.7: ALTER EXTENSION dex UPDATE TO '1.7'.
 *
 * test/t/009_upgrade.pl checks that an updated database has exactly the
 * objects of a fresh 1.7 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.7'" to load this file. \quit

/* ---- Workflows defined in JSON (1.7) ---- */

/*
 * A definition is a workflow written as a JSON document (README.md,
 * "Workflows defined in JSON"): its steps are interpreted inside the server
 * by the dex interpreter worker (src/workers/interpreter.c), which takes the
 * workflow tasks of the runs of a definition and completes them with the
 * same commands a coded workflow returns.  A run of a definition is an
 * ordinary run, started with dex.create_run by the definition's name and
 * version.  owner: the role that created the definition, whose privileges
 * its SQL steps run with.
 */
CREATE TABLE dex.definition (
    name        text NOT NULL,
    version     integer NOT NULL CHECK (version > 0),
    definition  jsonb NOT NULL,
    owner       regrole NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);
COMMENT ON TABLE dex.definition IS
    'Workflows defined in JSON (dex.create_definition): validated documents the interpreter worker runs; owner is the role whose privileges their SQL steps have.';

/*
 * The user tasks that wait for a person: a row while the step waits, written
 * by the interpreter in the transaction that starts the wait and deleted by
 * dex.complete_user_task (which delivers the external event the run waits
 * for, "user:<step>:<wait id>"), so that a second completion finds no row.
 */
CREATE TABLE dex.user_task (
    run_id            uuid NOT NULL REFERENCES dex.workflow_run (id) ON DELETE CASCADE,
    step              text NOT NULL,
    wait_id           integer NOT NULL,
    assignee          text,
    candidate_groups  text[],
    form              jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step)
);
COMMENT ON TABLE dex.user_task IS
    'User tasks of runs of definitions that wait for a person (dex.user_tasks, dex.complete_user_task).';

SELECT pg_catalog.pg_extension_config_dump('dex.definition', '');
SELECT pg_catalog.pg_extension_config_dump('dex.user_task', '');

CREATE FUNCTION dex.create_definition(name text, version integer, definition jsonb)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_definition';
COMMENT ON FUNCTION dex.create_definition(text, integer, jsonb) IS
    'Store a workflow defined in JSON under a name and version, after validating it against the schema of README.md "Workflows defined in JSON" (22023 with the JSON path of the offending element); 42710 if that version exists. Its SQL steps run with the privileges of the calling role. Runs start with dex.create_run(name, queue, variables, version).';

CREATE FUNCTION dex.get_definition(name text, version integer DEFAULT NULL)
RETURNS jsonb
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_get_definition';
COMMENT ON FUNCTION dex.get_definition(text, integer) IS
    'A definition''s JSON document: the given version, or the latest; NULL if there is none.';

CREATE FUNCTION dex.list_definitions(name text DEFAULT NULL)
RETURNS TABLE (name text, version integer, owner regrole, created_at timestamptz, steps integer)
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_list_definitions';
COMMENT ON FUNCTION dex.list_definitions(text) IS
    'The definitions (of one name, or all), by name and version: owner, creation time, number of steps.';

CREATE FUNCTION dex.delete_definition(name text, version integer)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_delete_definition';
COMMENT ON FUNCTION dex.delete_definition(text, integer) IS
    'Delete a definition; refused (55006) while runs of it have not ended (it reads every run to know), 42704 if it does not exist. Runs that ended keep their history.';

CREATE FUNCTION dex.user_tasks(run_id uuid DEFAULT NULL, assignee text DEFAULT NULL,
                               candidate_group text DEFAULT NULL)
RETURNS TABLE (run_id uuid, step text, assignee text, candidate_groups text[], form jsonb,
               workflow_name text, workflow_version integer, created_at timestamptz)
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_user_tasks';
COMMENT ON FUNCTION dex.user_tasks(uuid, text, text) IS
    'The user tasks waiting for a person, of runs that have not ended, on queues the caller may use: of one run, of an assignee, or of a candidate group (all when NULL), oldest first.';

CREATE FUNCTION dex.complete_user_task(run_id uuid, step text, variables jsonb DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_complete_user_task';
COMMENT ON FUNCTION dex.complete_user_task(uuid, text, jsonb) IS
    'Complete the user task a run of a definition waits for at a step: variables (a JSON object) are merged into the run''s variables and the run goes on. Once only: a second completion, or one for a step that does not wait, is refused (55000).';

REVOKE ALL ON dex.definition, dex.user_task FROM PUBLIC;
REVOKE ALL ON FUNCTION dex.create_definition(text, integer, jsonb), dex.get_definition(text, integer),
    dex.list_definitions(text), dex.delete_definition(text, integer), dex.user_tasks(uuid, text, text),
    dex.complete_user_task(uuid, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.create_definition(text, integer, jsonb), dex.delete_definition(text, integer)
    TO dex_admin;
GRANT EXECUTE ON FUNCTION dex.get_definition(text, integer), dex.list_definitions(text),
    dex.user_tasks(uuid, text, text), dex.complete_user_task(uuid, text, jsonb)
    TO dex_client, dex_admin;
