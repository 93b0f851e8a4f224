--
-- setup: install dex and check what it installs
--
CREATE EXTENSION dex;

-- every function of the API, with its signature
SELECT p.oid::regprocedure AS function, pg_get_function_result(p.oid) AS returns
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'dex'
 ORDER BY p.oid::regprocedure::text;

-- every function is documented and pins its search_path (a procedure cannot:
-- a SET clause forbids transaction control; its C code pins it instead, see
-- sql/security.sql)
SELECT p.oid::regprocedure AS undocumented_or_unpinned
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'dex'
   AND (obj_description(p.oid, 'pg_proc') IS NULL
        OR (p.prokind <> 'p'
            AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')));

-- the functions that plan with the planner settings all set the same ones, the list
-- util/spi.c's dex_set_planner_settings gives the code that cannot have a SET clause
-- (dex.queue_depth also turns bitmap scans off, for its own statement)
SELECT array_agg(DISTINCT settings) AS planner_settings
  FROM (SELECT array_agg(c ORDER BY c) FILTER (WHERE c NOT LIKE 'search_path=%'
                                                 AND c <> 'enable_bitmapscan=off') AS settings
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace, unnest(p.proconfig) c
         WHERE n.nspname = 'dex' GROUP BY p.oid) s
 WHERE settings IS NOT NULL;

-- the tables, and which are unlogged or partitioned
SELECT c.relname, c.relkind, c.relpersistence
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'dex' AND c.relkind IN ('r', 'p', 'v', 'S')
 ORDER BY 1;

-- clients cannot write the tables directly
SELECT has_table_privilege('public', 'dex.workflow_run', 'INSERT') AS public_can_insert;

-- settings and their defaults
SELECT name, setting, unit, context FROM pg_settings WHERE name LIKE 'dex.%' ORDER BY 1;
