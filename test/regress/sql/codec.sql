--
-- codec: protobuf <-> canonical proto3 JSON
--
-- round trips
SELECT dex.to_json('dex.v1.Payload', dex.from_json('dex.v1.Payload', '{"json": "{\"a\": 1}", "metadata": {"encoding": "json"}}'));
SELECT dex.to_json('dex.v1.Payload', dex.from_json('dex.v1.Payload', '{"binary": "AAEC/w=="}'));
SELECT dex.from_json('dex.v1.Payload', '{"json": "1"}');
SELECT dex.to_json('dex.v1.Failure', dex.from_json('dex.v1.Failure',
    '{"message": "outer", "terminal": true, "type": "Timeout", "cause": {"message": "inner", "details": {"json": "[1]"}}}'));
SELECT dex.to_json('dex.v1.RetryPolicy', dex.from_json('dex.v1.RetryPolicy',
    '{"maxAttempts": 3, "initialDelay": "1.500s", "multiplier": 2, "maxDelay": "60s", "nonRetryableTypes": ["Fatal"]}'));
SELECT dex.to_json('dex.v1.WorkflowEvent', dex.from_json('dex.v1.WorkflowEvent',
    '{"id": 3, "timestamp": "2026-01-02T03:04:05.123456Z", "timerCreated": {"name": "t", "elapseAt": "2026-01-02T03:04:06Z"}}'));
SELECT dex.to_json('dex.v1.Command', dex.from_json('dex.v1.Command',
    '{"id": 1, "startChildRun": {"workflowName": "child", "labels": {"a": "b"}}}'));
-- original proto field names are accepted too, and printed as lowerCamelCase
SELECT dex.to_json('dex.v1.ActivityTaskCompleted', dex.from_json('dex.v1.ActivityTaskCompleted',
    '{"activity_task_created_event_id": 7}'));
-- enums by name or number, 64-bit integers as strings
SELECT dex.to_json('dex.v1.WorkflowTask', dex.from_json('dex.v1.WorkflowTask',
    '{"status": "RUN_STATUS_RUNNING", "lockVersion": "9007199254740993"}'));
SELECT dex.to_json('dex.v1.WorkflowTask', dex.from_json('dex.v1.WorkflowTask', '{"status": 5}'));
-- default values are omitted
SELECT dex.to_json('dex.v1.Failure', dex.from_json('dex.v1.Failure', '{"message": "", "terminal": false}'));

-- malformed input is an error with its SQLSTATE
\set VERBOSITY sqlstate
SELECT dex.to_json('dex.v1.Payload', '\xffffffff');
SELECT dex.to_json('dex.v1.WorkflowEvent', '\x0a');
SELECT dex.to_json('dex.v1.NoSuchMessage', '\x');
SELECT dex.from_json('dex.v1.Payload', '{"jsn": "1"}');
SELECT dex.from_json('dex.v1.Payload', '[1, 2]');
SELECT dex.from_json('dex.v1.Payload', '{"binary": "not base64!"}');
SELECT dex.from_json('dex.v1.Payload', '{"json": "1", "binary": "AA=="}');
SELECT dex.from_json('dex.v1.WorkflowTask', '{"status": "NO_SUCH_STATUS"}');
SELECT dex.from_json('dex.v1.WorkflowTask', '{"historyLength": 1.5}');
SELECT dex.from_json('dex.v1.WorkflowTask', '{"historyLength": 99999999999}');
SELECT dex.from_json('dex.v1.WorkflowEvent', '{"timestamp": "yesterday"}');
SELECT dex.from_json('dex.v1.StartTimer', '{"delay": "5 minutes"}');
SELECT dex.from_json('dex.v1.Failure', '{"terminal": "yes"}');
\set VERBOSITY default
-- and the message says what is wrong
SELECT dex.from_json('dex.v1.Payload', '{"jsn": "1"}');
SELECT dex.to_json('dex.v1.Payload', '\xffffffff');

-- nesting: a Failure may nest 92 levels, so that dex can still wrap it in the events of a
-- history and of a workflow task, which have all 100 (found by fuzzing: a worker's failure
-- of 100 levels made its run's history undecodable, failing every poll that picked the run)
CREATE TEMP TABLE failure_chain AS
WITH RECURSIVE c(n, f) AS (SELECT 1, '{"message": "x"}'::jsonb
  UNION ALL SELECT n + 1, jsonb_build_object('message', 'x', 'cause', f) FROM c WHERE n < 93)
SELECT n, f FROM c WHERE n >= 92;
SELECT n, octet_length(dex.from_json('dex.v1.Failure', f)) FROM failure_chain WHERE n = 92;
SELECT dex.from_json('dex.v1.Failure', f) FROM failure_chain WHERE n = 93;
-- the protobuf form: the 93 levels taken out of an ActivityTask, where they fit
SELECT dex.to_json('dex.v1.Failure',
                   substring(dex.from_json('dex.v1.ActivityTask', jsonb_build_object('lastFailure', f)) FROM 4))
FROM failure_chain WHERE n = 93;
-- a 92-level failure under a timeout failure in a workflow task's history still decodes
SELECT dex.to_json('dex.v1.WorkflowTask', dex.from_json('dex.v1.WorkflowTask',
         jsonb_build_object('history', jsonb_build_array(jsonb_build_object('activityTaskFailed',
           jsonb_build_object('failure', jsonb_build_object('message', 'timeout', 'cause', f))))))) IS NOT NULL
FROM failure_chain WHERE n = 92;
