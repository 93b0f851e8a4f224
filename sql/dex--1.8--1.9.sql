/*
 * dex 1.8 -> 1.9: ALTER EXTENSION dex UPDATE TO '1.9'.
 *
 * A fresh install of 1.9 is dex--1.7.sql followed by the updates to 1.8 and
 * to 1.9 (CREATE EXTENSION runs the chain).  test/t/009_upgrade.pl checks
 * that every released version updated to 1.9 has exactly the objects of a
 * fresh install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.9'" to load this file. \quit

/* ---- Who acted through the REST API (1.9) ---- */

/*
 * An operator's action through the REST API (a cancel, a suspension, ...)
 * runs as the role of the caller's token, in a session of the server's own
 * login role.  The history records who acted from dex.actor when it is set,
 * else the session user: authenticating a token sets it, for the rest of the
 * transaction, to the token's role and name, "tenant_a (token ops-alice)".
 * dex.actor is a superuser setting, so no other client can claim to be a
 * token; this function, SECURITY DEFINER, sets it as the extension's owner.
 */
CREATE OR REPLACE FUNCTION dex.authenticate_api_token(token text)
RETURNS name
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT a.rolname
  FROM (SELECT r.rolname, t.name
          FROM dex.api_token t
          JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) t.role
                                    AND r.rolname OPERATOR(pg_catalog.=) t.role_name
         WHERE t.token_hash OPERATOR(pg_catalog.=)
               pg_catalog.sha256(pg_catalog.convert_to(authenticate_api_token.token, 'UTF8'))
           AND (t.expires_at IS NULL OR t.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
           AND NOT r.rolsuper
           AND pg_catalog.pg_has_role(CASE pg_catalog.current_setting('role')
                                          WHEN 'none' THEN SESSION_USER
                                          ELSE pg_catalog.current_setting('role')::name END,
                                      r.oid, 'MEMBER')
        OFFSET 0) a,
       LATERAL pg_catalog.set_config('dex.actor',
                                     pg_catalog.format('%s (token %s)', a.rolname, a.name), true) s
$$;
COMMENT ON FUNCTION dex.authenticate_api_token(text) IS
    'The role an API token''s requests run as, for the REST API server: NULL when the token is unknown, expired or revoked, its role was dropped, renamed or made superuser, or the caller (the server''s login role) is not a member of it. Sets dex.actor to the role and the token''s name for the rest of the transaction: the history records the actions taken through the API as theirs.';

/* ---- Who may start runs of a definition (1.9) ---- */

/*
 * A run of a definition runs its SQL steps with the privileges of the
 * definition's owner and the variables its starter chose, so starting one
 * takes a privilege: a role may start runs of a definition when it is a
 * superuser, a member of the owner of the version it starts, or a member of
 * a role granted the definition here (dex.grant_definition).  Checked by
 * dex.create_run(s), by startChildRun commands, by the schedule functions
 * that choose or start runs, and by call steps (for the calling
 * definition's owner); see src/engine/definition_access.c.
 */
CREATE TABLE dex.definition_grant (
    name        text NOT NULL,          -- a definition's name: every version of it
    role        regrole NOT NULL,
    granted_by  regrole NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (name, role)
);
COMMENT ON TABLE dex.definition_grant IS
    'Roles that may start runs of a definition besides its owner (dex.grant_definition, dex.revoke_definition).';
REVOKE ALL ON dex.definition_grant FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('dex.definition_grant', '');

-- Until 1.8 any role that could use the queue started runs of any definition: the
-- definitions that exist keep that for the roles of dex (new ones are their owner's).
INSERT INTO dex.definition_grant (name, role, granted_by)
SELECT DISTINCT d.name, 'dex_client'::regrole, d.owner FROM dex.definition d;

CREATE FUNCTION dex.grant_definition(name text, role regrole)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_grant_definition';
COMMENT ON FUNCTION dex.grant_definition(text, regrole) IS
    'Let a role (and its members) start runs of every version of a definition; for a member of the definition''s owner (42501 otherwise), 42704 if no such definition. Granting twice is one grant.';

CREATE FUNCTION dex.revoke_definition(name text, role regrole)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_revoke_definition';
COMMENT ON FUNCTION dex.revoke_definition(text, regrole) IS
    'Take back dex.grant_definition: the role may no longer start runs of the definition (runs it started go on); for a member of the definition''s owner, 42704 if there is no such grant.';

CREATE VIEW dex.definition_privileges AS
SELECT g.name, g.role, g.granted_by, g.granted_at FROM dex.definition_grant g;
COMMENT ON VIEW dex.definition_privileges IS
    'Who may start runs of which definition besides its owner: the grants of dex.grant_definition.';

REVOKE ALL ON FUNCTION dex.grant_definition(text, regrole), dex.revoke_definition(text, regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.grant_definition(text, regrole), dex.revoke_definition(text, regrole) TO dex_admin;
GRANT SELECT ON dex.definition_privileges TO dex_admin, dex_client;

-- The schedule functions that choose or start runs check the caller's right to start
-- them: they take their owner's rights in C, which keeps the caller (api_call.c).
ALTER FUNCTION dex.create_schedule(text, text, text, text, interval, jsonb, integer, text, text, interval, interval, timestamptz, timestamptz, boolean, jsonb) SECURITY INVOKER;
ALTER FUNCTION dex.alter_schedule(text, text, interval, jsonb, integer, text, text, interval, interval, timestamptz, timestamptz, jsonb, text, text) SECURITY INVOKER;
ALTER FUNCTION dex.trigger_schedule(text, text) SECURITY INVOKER;
ALTER FUNCTION dex.backfill_schedule(text, timestamptz, timestamptz, text) SECURITY INVOKER;

/* ---- The run a SQL step belongs to (1.9) ---- */

CREATE FUNCTION dex.step_context(OUT run_id uuid, OUT definition text, OUT version integer, OUT step text)
RETURNS record
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_step_context';
COMMENT ON FUNCTION dex.step_context() IS
    'In a SQL step of a workflow defined in JSON: its run''s id, the definition''s name and version, and the step''s id (for idempotency keys and audit rows); NULLs anywhere else.';
REVOKE ALL ON FUNCTION dex.step_context() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.step_context() TO dex_admin, dex_client, dex_worker;
