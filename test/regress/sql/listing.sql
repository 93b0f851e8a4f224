--
-- listing: dex.list_runs filters and keyset pages
--
SELECT dex.create_queue('list-wf', 'workflow');
SELECT count(*) FROM (
    SELECT dex.create_run('lister', 'list-wf', to_jsonb(i), labels => jsonb_build_object('parity', CASE WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END))
      FROM generate_series(1, 7) i) r;
SELECT dex.create_run('other', 'list-wf') IS NOT NULL AS created;

-- newest first, three a page, following before_id
SELECT array_agg(argument ORDER BY id DESC) AS page1, (array_agg(id ORDER BY id))[1] AS last FROM (
    SELECT * FROM dex.list_runs(workflow_name => 'lister', page_size => 3)) p \gset
\echo :page1
SELECT array_agg(argument ORDER BY id DESC) AS page2, (array_agg(id ORDER BY id))[1] AS last FROM (
    SELECT * FROM dex.list_runs(workflow_name => 'lister', page_size => 3, before_id => :'last')) p \gset
\echo :page2
SELECT array_agg(argument ORDER BY id DESC) AS page3 FROM (
    SELECT * FROM dex.list_runs(workflow_name => 'lister', page_size => 3, before_id => :'last')) p;

-- labels containment and status
SELECT array_agg(argument ORDER BY id) AS even FROM dex.list_runs(labels => '{"parity": "even"}');
SELECT count(*) AS created FROM dex.list_runs(workflow_name => 'lister', status => 'CREATED');
SELECT count(*) AS completed FROM dex.list_runs(workflow_name => 'lister', status => 'COMPLETED');
SELECT count(*) AS recent FROM dex.list_runs(workflow_name => 'lister', created_after => now() - interval '1 hour');
SELECT count(*) AS future FROM dex.list_runs(workflow_name => 'lister', created_after => now() + interval '1 hour');

\set VERBOSITY sqlstate
SELECT * FROM dex.list_runs(page_size => 0);
SELECT * FROM dex.list_runs(status => 'DONE');
SELECT * FROM dex.list_runs(labels => '[1]');
\set VERBOSITY default
