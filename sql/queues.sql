--
-- queues: creation, partitions, validation
--
SELECT dex.create_queue('orders', 'workflow');
SELECT dex.create_queue('payments.activities', 'activity', 50);

SELECT name, kind, status, capacity, partition FROM dex.queue ORDER BY id;

-- each queue has its own partition, UNLOGGED for both kinds of task
SELECT c.relname, c.relpersistence, pg_get_expr(c.relpartbound, c.oid) IS NOT NULL AS is_partition
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'dex' AND c.relkind = 'r' AND c.relname LIKE '%task_q_%'
 ORDER BY 1;

-- duplicate names, and names that would share a partition, are refused
SELECT dex.create_queue('orders', 'workflow');
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
SELECT count(*) AS partitions FROM pg_inherits
 WHERE inhparent IN ('dex.workflow_task'::regclass, 'dex.activity_task'::regclass);
