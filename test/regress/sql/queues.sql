--
-- queues: creation, validation; a queue makes no relation of its own (1.8)
--
SELECT dex.create_queue('orders', 'workflow');
SELECT dex.create_queue('payments.activities', 'activity', 50);

SELECT name, kind, status, capacity FROM dex.queue ORDER BY id;

-- their tasks are rows of the two task tables, UNLOGGED; no relation is made for a queue
SELECT c.relname, c.relkind, c.relpersistence
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'dex' AND (c.relname LIKE '%task_q_%' OR c.relname IN ('workflow_task', 'activity_task'))
 ORDER BY 1;

-- duplicate names are refused, whatever the kind; names are compared exactly, so names
-- that differ in case or punctuation are other queues (1.7 refused them: they shared a
-- partition name)
SELECT dex.create_queue('orders', 'workflow');
SELECT dex.create_queue('orders', 'activity');
SELECT dex.create_queue('ORDERS', 'workflow');
SELECT dex.create_queue('payments-activities', 'activity');
SELECT dex.create_queue(repeat('x', 50), 'workflow');
SELECT dex.create_queue(repeat('x', 47) || 'y', 'workflow');

-- invalid names, kinds and capacities
SELECT dex.create_queue('', 'workflow');
SELECT dex.create_queue('has space', 'workflow');
SELECT dex.create_queue('-leading-dash', 'workflow');
SELECT dex.create_queue(repeat('a', 129), 'workflow');
SELECT dex.create_queue('q1', 'timer');
SELECT dex.create_queue('q1', 'workflow', 0);
SELECT dex.create_queue(NULL, 'workflow');

-- none of the refused calls left anything behind
SELECT name FROM dex.queue ORDER BY id;
SELECT count(*) AS partitions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'dex' AND c.relname LIKE '%task_q_%';
