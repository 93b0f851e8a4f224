/*
 * dex 1.5 -> 1.6: ALTER EXTENSION dex UPDATE TO '1.6'.
 *
 * test/t/009_upgrade.pl checks that an updated database has exactly the
 * objects of a fresh 1.6 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.6'" to load this file. \quit

-- API tokens (REST API, issue 19)
/*
 * API tokens let clients that do not speak SQL use dex through the REST API
 * (python3 -m dex serve): each token maps to a database role, and the server,
 * whose login role is a member of the roles it may act as, runs every request
 * of the token with SET ROLE to that role, so that PostgreSQL's grants and
 * dex's queue grants decide what it may do, never more.  A token is 'dex_'
 * and 64 hex digits (244 random bits from gen_random_uuid), shown once by
 * dex.create_api_token; only its SHA-256 is stored (no salt is needed at
 * that entropy).  A token names its role by oid and by name: a dropped role,
 * or another created later with its oid, has no token, and renaming a role
 * voids its tokens.  A token never acts as a superuser.
 *
 * The caller of these functions is the role set with SET ROLE, else the
 * session user: a SECURITY DEFINER function cannot see the role that called
 * it (see Roles and privileges), and these write a table nobody else may.
 * Called from another role's SECURITY DEFINER function they still check the
 * session's role, which only ever refuses more.
 */
CREATE TABLE dex.api_token (
    name        text PRIMARY KEY,
    role        regrole NOT NULL,
    role_name   name NOT NULL,          -- the role's name when the token was made
    token_hash  bytea NOT NULL UNIQUE,  -- sha256 of the token
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    created_by  name NOT NULL,
    expires_at  timestamptz
);
COMMENT ON TABLE dex.api_token IS
    'API tokens of the REST API: the SHA-256 of each token and the role its requests run as (dex.create_api_token, dex.revoke_api_token).';
REVOKE ALL ON dex.api_token FROM PUBLIC;

CREATE FUNCTION dex.create_api_token(name text, role regrole, expires_at timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller name := CASE pg_catalog.current_setting('role')
                       WHEN 'none' THEN SESSION_USER
                       ELSE pg_catalog.current_setting('role') END;
    token text;
BEGIN
    IF create_api_token.name IS NULL OR create_api_token.role IS NULL THEN
        RAISE EXCEPTION 'token name and role must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF create_api_token.name OPERATOR(pg_catalog.!~) '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid token name "%"', create_api_token.name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A name has 1 to 128 letters, digits, "_", "-" or ".", and starts with a letter or digit.';
    END IF;
    IF create_api_token.expires_at IS NOT NULL
       AND NOT (pg_catalog.isfinite(create_api_token.expires_at)
                AND create_api_token.expires_at OPERATOR(pg_catalog.>) pg_catalog.now()) THEN
        RAISE EXCEPTION 'a token must expire at a finite time in the future'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r
         WHERE r.oid OPERATOR(pg_catalog.=) create_api_token.role) THEN
        RAISE EXCEPTION 'a token may not act as superuser %', create_api_token.role
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT pg_catalog.pg_has_role(caller, create_api_token.role, 'MEMBER') THEN
        RAISE EXCEPTION 'permission denied to make a token for role %', create_api_token.role
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Only members of role %s may make its tokens; %I is not one.',
                                             create_api_token.role, caller);
    END IF;
    token := 'dex_' OPERATOR(pg_catalog.||)
             pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', '') OPERATOR(pg_catalog.||)
             pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', '');
    INSERT INTO dex.api_token (name, role, role_name, token_hash, created_by, expires_at)
    SELECT create_api_token.name, r.oid, r.rolname,
           pg_catalog.sha256(pg_catalog.convert_to(token, 'UTF8')), caller, create_api_token.expires_at
      FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) create_api_token.role
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'API token "%" already exists', create_api_token.name
            USING ERRCODE = 'duplicate_object';
    END IF;
    RETURN token;
END
$$;
COMMENT ON FUNCTION dex.create_api_token(text, regrole, timestamptz) IS
    'Make an API token of the REST API whose requests run as role (never a superuser; the caller must be a member of it), valid until expires_at (NULL: until revoked); returns the token, which is not stored and cannot be shown again.';

CREATE FUNCTION dex.revoke_api_token(name text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF revoke_api_token.name IS NULL THEN
        RAISE EXCEPTION 'token name must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM dex.api_token t WHERE t.name OPERATOR(pg_catalog.=) revoke_api_token.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'API token "%" does not exist', revoke_api_token.name
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION dex.revoke_api_token(text) IS
    'Delete an API token: the REST API refuses it from its next request on.';

CREATE FUNCTION dex.authenticate_api_token(token text)
RETURNS name
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT r.rolname
  FROM dex.api_token t
  JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) t.role
                            AND r.rolname OPERATOR(pg_catalog.=) t.role_name
 WHERE t.token_hash OPERATOR(pg_catalog.=) pg_catalog.sha256(pg_catalog.convert_to(authenticate_api_token.token, 'UTF8'))
   AND (t.expires_at IS NULL OR t.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
   AND NOT r.rolsuper
   AND pg_catalog.pg_has_role(CASE pg_catalog.current_setting('role')
                                  WHEN 'none' THEN SESSION_USER
                                  ELSE pg_catalog.current_setting('role')::name END,
                              r.oid, 'MEMBER')
$$;
COMMENT ON FUNCTION dex.authenticate_api_token(text) IS
    'The role an API token''s requests run as, for the REST API server: NULL when the token is unknown, expired or revoked, its role was dropped, renamed or made superuser, or the caller (the server''s login role) is not a member of it.';

CREATE VIEW dex.api_tokens AS
SELECT t.name, t.role, t.created_at, t.created_by, t.expires_at
  FROM dex.api_token t;
COMMENT ON VIEW dex.api_tokens IS
    'The API tokens of the REST API, without their hashes: name, the role their requests run as, who made them and when, when they expire.';

ALTER FUNCTION dex.create_api_token(text, regrole, timestamptz) SECURITY DEFINER;
ALTER FUNCTION dex.revoke_api_token(text) SECURITY DEFINER;
ALTER FUNCTION dex.authenticate_api_token(text) SECURITY DEFINER;
REVOKE ALL ON FUNCTION dex.create_api_token(text, regrole, timestamptz), dex.revoke_api_token(text),
    dex.authenticate_api_token(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.create_api_token(text, regrole, timestamptz), dex.revoke_api_token(text)
    TO dex_admin;
GRANT EXECUTE ON FUNCTION dex.authenticate_api_token(text) TO dex_client, dex_worker, dex_admin;
GRANT SELECT ON dex.api_tokens TO dex_admin;
SELECT pg_catalog.pg_extension_config_dump('dex.api_token',
    'WHERE EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) role)');
