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
