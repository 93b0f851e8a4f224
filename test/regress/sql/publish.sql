--
-- publish: a queue's runs' events as logical decoding messages (dex 1.10).
-- Turning publishing on and off, its form, and the publishEvent command; what
-- a consumer receives is test/t/025_publish.pl's (this cluster's wal_level is
-- not logical: alter_queue says that nothing is published).
--
SELECT dex.create_queue('pb-wf', 'workflow'), dex.create_queue('pb-other', 'workflow');

-- 1. on, with the warning that this server publishes nothing; off; the form
SELECT dex.alter_queue('pb-wf', publish => true);
SELECT publish FROM dex.queue WHERE name = 'pb-wf';
SELECT dex.alter_queue('pb-wf', publish_format => 'protobuf');
SELECT publish FROM dex.queue WHERE name = 'pb-wf';
-- turned on again without a form, it keeps the one it has
SELECT dex.alter_queue('pb-wf', publish => true);
SELECT publish FROM dex.queue WHERE name = 'pb-wf';
SELECT dex.alter_queue('pb-wf', publish => false);
SELECT publish FROM dex.queue WHERE name = 'pb-wf';
-- other settings leave it as it is
SELECT dex.alter_queue('pb-wf', publish => true, publish_format => 'json');
SELECT dex.alter_queue('pb-wf', capacity => 5);
SELECT publish, capacity FROM dex.queue WHERE name = 'pb-wf';

-- 2. bad arguments are refused and change nothing
SELECT dex.alter_queue('pb-wf', publish_format => 'xml');
SELECT dex.alter_queue('pb-wf', publish => false, publish_format => 'json');
SELECT dex.alter_queue('pb-other', publish_format => 'json');
SELECT dex.alter_queue('pb-nowhere', publish => true);
SELECT name, publish FROM dex.queue WHERE name LIKE 'pb-%' ORDER BY name;

-- 3. publishEvent records eventPublished with the command's id; without a name it is refused
SELECT dex.create_run('publisher', 'pb-wf') AS r \gset
SELECT lock_version AS v FROM dex.poll_tasks('pb-wf', 'w', 1) \gset
SELECT dex.complete_task(:'r', 0, :v, '[{"id": 1, "publishEvent": {}}]');
SELECT dex.complete_task(:'r', 0, :v, '[{"id": 1, "publishEvent": {"name": ""}}]');
SELECT dex.complete_task(:'r', 0, :v, '[{"id": 0, "publishEvent": {"name": "x"}}]');
SELECT dex.complete_task(:'r', 0, :v,
    '[{"id": 1, "publishEvent": {"name": "order.shipped", "payload": {"json": "{\"parcel\": 7}"}}},
      {"id": 2, "publishEvent": {"name": "no.payload"}},
      {"id": 3, "completeRun": {}}]');
SELECT event->'id' AS id, event->'eventPublished' AS published
  FROM dex.run_history(:'r') WHERE event ? 'eventPublished' ORDER BY sequence;
SELECT status FROM dex.get_run(:'r');

-- 4. the protobuf form of the message a consumer gets reads back as JSON
SELECT dex.to_json('dex.v1.PublishedEvent',
    dex.from_json('dex.v1.PublishedEvent',
        '{"runId": "r", "queue": "pb-wf", "workflowName": "publisher", "workflowVersion": 1,
          "generation": 0, "sequence": 5, "kind": "eventPublished",
          "event": {"id": 1, "eventPublished": {"name": "order.shipped"}}}'));
