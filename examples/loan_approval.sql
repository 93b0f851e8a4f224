-- A loan approval defined in JSON, run by dex's interpreter (docs/json-workflows.md, "Workflows defined in
-- JSON"): a SQL scoring step, a service task for a worker, a gateway, and a user task for large
-- amounts.  Run it with psql in a database where dex 1.7 is installed and served:
--
--   psql -v ON_ERROR_STOP=1 -f examples/loan_approval.sql
--
-- The "worker" of the credit check and the loan officer are played by this script.
\set VERBOSITY terse

SELECT dex.create_queue('loans', 'workflow')
 WHERE NOT EXISTS (SELECT FROM dex.queue WHERE name = 'loans');
SELECT dex.create_queue('credit-checks', 'activity')
 WHERE NOT EXISTS (SELECT FROM dex.queue WHERE name = 'credit-checks');

-- what the SQL step writes: scores, with the owner's privileges (this script's role)
CREATE TABLE IF NOT EXISTS loan_score (id serial PRIMARY KEY, applicant integer, score integer,
                                       scored_at timestamptz DEFAULT now());

SELECT dex.create_definition('loan-approval', 1, $json${
  "description": "score, check credit, approve small loans, ask an officer for large ones",
  "steps": [
    {"id": "score", "type": "sql",
     "sql": "INSERT INTO loan_score (applicant, score) VALUES (($1->'applicant'->>'id')::int, least(850, 300 + ($1->>'income')::int / 200)) RETURNING score",
     "next": "credit"},
    {"id": "credit", "type": "service", "activity": "credit_check", "queue": "credit-checks",
     "input": "$.applicant", "retryCount": 3, "startToCloseTimeout": "30 s",
     "resultVariable": "bureau", "next": "route"},
    {"id": "route", "type": "gateway", "conditions": [
        {"when": "$.score < 500 || $.bureau.defaults > 0", "next": "reject"},
        {"when": "$.amount > 50000", "next": "review"}],
     "default": "approve"},
    {"id": "review", "type": "user", "candidateGroups": ["loan-officers"],
     "form": {"fields": ["approved", "comment"]}, "timeout": "7 days", "timeoutNext": "reject",
     "next": "decide"},
    {"id": "decide", "type": "gateway",
     "conditions": [{"when": "$.approved == true", "next": "approve"}], "default": "reject"},
    {"id": "approve", "type": "end", "output": "$"},
    {"id": "reject", "type": "end", "fail": {"message": "loan rejected", "type": "Rejected"}}
  ]}$json$::jsonb)
 WHERE dex.get_definition('loan-approval', 1) IS NULL;

-- two applications: a small one approved at once, a large one for an officer
SELECT dex.create_run('loan-approval', 'loans',
                      '{"amount": 8000, "income": 70000, "applicant": {"id": 1}}') AS small \gset
SELECT dex.create_run('loan-approval', 'loans',
                      '{"amount": 90000, "income": 110000, "applicant": {"id": 2}}') AS large \gset

-- the credit bureau's worker: wait for both checks, answer them
DO $$
BEGIN
  FOR i IN 1..500 LOOP
    EXIT WHEN (SELECT count(*) FROM dex.queue_depth WHERE queue = 'credit-checks' AND ready > 1) > 0;
    PERFORM pg_sleep(0.02);
  END LOOP;
END $$;
SELECT count(dex.complete_task(run_id, task_id, lock_version, '{"defaults": 0, "rating": "A"}'))
       AS credit_checks_done
  FROM dex.poll_tasks('credit-checks', 'bureau-worker', 10);

-- the small loan is approved without anyone
CALL dex.wait_for_run(:'small', '30 s');

-- the large one waits for a loan officer
DO $$
BEGIN
  FOR i IN 1..500 LOOP
    EXIT WHEN EXISTS (SELECT FROM dex.user_tasks(candidate_group => 'loan-officers'));
    PERFORM pg_sleep(0.02);
  END LOOP;
END $$;
SELECT step, candidate_groups, form FROM dex.user_tasks(:'large');
SELECT dex.complete_user_task(:'large', 'review', '{"approved": true, "comment": "good history"}');
CALL dex.wait_for_run(:'large', '30 s');

-- the history shows the steps as events, as for a coded workflow
SELECT h.sequence, (SELECT k FROM jsonb_object_keys(h.event - 'id' - 'timestamp') k) AS event
  FROM dex.run_history(:'large') h;
