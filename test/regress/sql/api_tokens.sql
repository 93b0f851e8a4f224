-- API tokens of the REST API: dex_admin makes them for roles it is a member of, never for a
-- superuser; only their SHA-256 is kept; the server's login role turns a token into the role
-- it then acts as (dex.authenticate_api_token) only if it is a member of that role.
CREATE ROLE regress_tok_admin IN ROLE dex_admin;
CREATE ROLE regress_tok_tenant IN ROLE dex_client;
CREATE ROLE regress_tok_other IN ROLE dex_client;
CREATE ROLE regress_tok_server IN ROLE dex_client;
GRANT regress_tok_tenant TO regress_tok_admin, regress_tok_server;
CREATE ROLE regress_tok_nobody;

SET ROLE regress_tok_admin;
SELECT dex.create_api_token('tenant-1', 'regress_tok_tenant') AS t1 \gset
SELECT dex.create_api_token('tenant-2', 'regress_tok_tenant', expires_at => now() + interval '1 day') AS t2 \gset
-- a token is dex_ and 64 hex digits, and differs every time
SELECT :'t1' ~ '^dex_[0-9a-f]{64}$' AS well_formed, :'t1' <> :'t2' AS different;
SELECT name, role, created_by, expires_at IS NOT NULL AS expires FROM dex.api_tokens ORDER BY name;
-- refused, and nothing made: unknown role, a role the admin is not a member of, a superuser,
-- bad names, NULLs, an expiry in the past or not finite, a name taken
\set VERBOSITY sqlstate
SELECT dex.create_api_token('x', 'regress_tok_missing');
SELECT dex.create_api_token('other-1', 'regress_tok_other');
SELECT dex.create_api_token('super-1', 'postgres');
SELECT dex.create_api_token('', 'regress_tok_tenant');
SELECT dex.create_api_token('-lead', 'regress_tok_tenant');
SELECT dex.create_api_token('bad name', 'regress_tok_tenant');
SELECT dex.create_api_token(repeat('n', 129), 'regress_tok_tenant');
SELECT dex.create_api_token(NULL, 'regress_tok_tenant');
SELECT dex.create_api_token('null-role', NULL);
SELECT dex.create_api_token('past', 'regress_tok_tenant', expires_at => now() - interval '1 s');
SELECT dex.create_api_token('forever', 'regress_tok_tenant', expires_at => 'infinity');
SELECT dex.create_api_token('tenant-1', 'regress_tok_tenant');
-- the admin reads no token hash
SELECT count(*) FROM dex.api_token;
\set VERBOSITY default
SELECT count(*) AS tokens FROM dex.api_tokens;
RESET ROLE;

-- only hashes are stored
SELECT count(*) AS stored_in_clear FROM dex.api_token
 WHERE token_hash = convert_to(:'t1', 'UTF8') OR position(convert_to(:'t1', 'UTF8') IN token_hash) > 0;
SELECT count(*) AS hashed FROM dex.api_token WHERE token_hash = sha256(convert_to(:'t1', 'UTF8'));

-- the server's login role, a member of the tenant role, learns the role; a role that is not a
-- member learns nothing, even with the token
SET ROLE regress_tok_server;
SELECT dex.authenticate_api_token(:'t1') AS t1_role, dex.authenticate_api_token(:'t2') AS t2_role,
       dex.authenticate_api_token('dex_' || repeat('0', 64)) AS unknown,
       dex.authenticate_api_token(NULL) AS null_token;
RESET ROLE;
SET ROLE regress_tok_other;
SELECT dex.authenticate_api_token(:'t1') AS not_a_member;
RESET ROLE;
-- no dex role, no call; a client neither makes nor revokes tokens, nor lists them
SET ROLE regress_tok_nobody;
\set VERBOSITY sqlstate
SELECT dex.authenticate_api_token(:'t1');
RESET ROLE;
SET ROLE regress_tok_tenant;
SELECT dex.create_api_token('mine', 'regress_tok_tenant');
SELECT dex.revoke_api_token('tenant-1');
SELECT count(*) FROM dex.api_tokens;
\set VERBOSITY default
RESET ROLE;

-- who acted: the token sets dex.actor for its transaction, and the run's history records
-- the token's role and name as the actor; no other client may set it, and it ends with the
-- transaction
SELECT dex.create_queue('tok-wf', 'workflow');
SELECT dex.create_run('w', 'tok-wf') AS tok_run \gset
SET ROLE regress_tok_server;
BEGIN;
SELECT dex.authenticate_api_token(:'t1') AS role, current_setting('dex.actor') AS actor;
SET LOCAL ROLE regress_tok_tenant;
SELECT dex.cancel_run(:'tok_run', 'through the API');
COMMIT;
SELECT current_setting('dex.actor') AS actor_after_commit;
\set VERBOSITY sqlstate
SET dex.actor = 'regress_tok_tenant (token forged)';
SELECT set_config('dex.actor', 'regress_tok_tenant (token forged)', true);
\set VERBOSITY default
RESET ROLE;
SELECT event->'runCancelled' AS cancelled FROM dex.run_history(:'tok_run') WHERE event ? 'runCancelled';

-- an expired token authenticates nobody (made to expire here by the owner)
UPDATE dex.api_token SET expires_at = now() - interval '1 s' WHERE name = 'tenant-2';
SET ROLE regress_tok_server;
SELECT dex.authenticate_api_token(:'t2') AS expired;
RESET ROLE;

-- a role renamed voids its tokens; renamed back, they work again
ALTER ROLE regress_tok_tenant RENAME TO regress_tok_renamed;
SET ROLE regress_tok_server;
SELECT dex.authenticate_api_token(:'t1') AS renamed;
RESET ROLE;
ALTER ROLE regress_tok_renamed RENAME TO regress_tok_tenant;
SET ROLE regress_tok_server;
SELECT dex.authenticate_api_token(:'t1') AS renamed_back;
RESET ROLE;
-- a role made superuser after its token was made is not acted as
ALTER ROLE regress_tok_tenant SUPERUSER;
SET ROLE regress_tok_server;
SELECT dex.authenticate_api_token(:'t1') AS now_superuser;
RESET ROLE;
ALTER ROLE regress_tok_tenant NOSUPERUSER;

-- revoked: refused from then on; revoking again is an error
SET ROLE regress_tok_admin;
SELECT dex.revoke_api_token('tenant-1');
\set VERBOSITY sqlstate
SELECT dex.revoke_api_token('tenant-1');
SELECT dex.revoke_api_token(NULL);
\set VERBOSITY default
RESET ROLE;
SET ROLE regress_tok_server;
SELECT dex.authenticate_api_token(:'t1') AS revoked;
RESET ROLE;

-- a dropped role's tokens stay inert (a role created later with its oid would have another
-- name); the rows of dropped roles are not dumped
SET ROLE regress_tok_admin;
SELECT dex.create_api_token('tenant-3', 'regress_tok_tenant') AS t3 \gset
RESET ROLE;
REVOKE regress_tok_tenant FROM regress_tok_admin, regress_tok_server;
DROP ROLE regress_tok_tenant;
SELECT name, role_name, pg_catalog.pg_get_userbyid(role) LIKE 'unknown%' AS role_gone
  FROM dex.api_token ORDER BY name;
SELECT dex.authenticate_api_token(:'t3') AS dropped;
SELECT extcondition[array_position(extconfig, 'dex.api_token'::regclass)] AS dump_condition
  FROM pg_extension WHERE extname = 'dex';

DELETE FROM dex.api_token;
DROP ROLE regress_tok_admin, regress_tok_other, regress_tok_server, regress_tok_nobody;
