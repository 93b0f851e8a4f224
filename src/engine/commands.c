/*-------------------------------------------------------------------------
 *
 * commands.c
 *	  The checks of a workflow task's commands that need nothing but the
 *	  commands themselves.
 *
 * This file owns what makes a WorkflowTaskCompletion well formed, whatever
 * the run it completes: every command has a kind; ids are not negative, and
 * positive for the commands that create something; the command that ends
 * the run (completeRun, failRun, continueAsNew) comes last; names and event
 * ids are non-empty and at most DEX_NAME_MAX_LEN bytes where dex stores them as keys;
 * priorities are 0..100, versions not negative; delays and timeouts are in
 * range (at most 100 years); failRun carries a failure.  A violation is
 * ERRCODE_INVALID_PARAMETER_VALUE.
 *
 * The commands after a continueAsNew are left to commands_apply.c: there a run
 * with pending work refuses the continueAsNew itself
 * (ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE) before the command that
 * follows it is refused, and that order is kept.
 *
 * dex_check_commands runs once per completion, as it is parsed (api/api_complete.c),
 * before any run is locked or anything written, so that a malformed
 * completion fails its call whatever the state of its task and run.  The
 * checks that need the database stay where the commands are applied
 * (commands_apply.c): that a queue exists and has the right kind, that a timer
 * being cancelled was started by the run, that command ids grow over the
 * run's history (determinism), that nothing is pending at continueAsNew;
 * and the retry policy is checked where its defaults apply (retry.c).
 *
 * Nothing here uses SPI, tables or settings: the fuzz harness (test/fuzz)
 * links this file outside the server.
 *
 * IDENTIFICATION
 *	  src/commands.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "engine/engine.h"

/* The longest delay or timeout a command may ask for: 100 years */
#define MAX_DELAY_MS ((int64) 100 * 365 * 24 * 3600 * 1000)

/* The longest names and keys dex stores, as dex.create_run checks them */

/* Milliseconds of a Duration, rounded up so that a positive one stays positive */
int64
dex_duration_ms(const Google__Protobuf__Duration *d)
{
	if (d == NULL)
		return 0;
	return d->seconds * 1000 + (d->nanos + 999999) / 1000000;
}

/* The JSON name of a command's kind ("scheduleActivity"), for messages */
const char *
dex_command_name(const Dex__V1__Command *cmd)
{
	char	   *name = dex_pb_case_json_name(&dex__v1__command__descriptor, (uint32) cmd->kind_case);

	return name ? name : "empty";
}

/* Whether a Duration is unset or at most 100 years and at least min_ms */
static bool
duration_ok(const Google__Protobuf__Duration *d, int64 min_ms)
{
	int64		ms = dex_duration_ms(d);

	return d == NULL || (ms >= min_ms && ms <= MAX_DELAY_MS);
}

static void
require_positive_id(const Dex__V1__Command *cmd)
{
	if (cmd->id <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command %s needs a positive id", dex_command_name(cmd)),
				 errdetail("Commands that create something carry the event id the workflow assigned to it.")));
}

/* A marker's or a published event's name: 1 to DEX_NAME_MAX_LEN bytes */
static void
require_name(const Dex__V1__Command *cmd, const char *name)
{
	if (name == NULL || name[0] == '\0' || strlen(name) > DEX_NAME_MAX_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command %s %d needs a name of 1 to %d bytes",
						dex_command_name(cmd), cmd->id, DEX_NAME_MAX_LEN)));
}

static void
check_schedule_activity(const Dex__V1__Command *cmd)
{
	const Dex__V1__ScheduleActivity *sa = cmd->schedule_activity;
	int32		id = cmd->id;

	require_positive_id(cmd);
	if (sa->name == NULL || sa->name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command scheduleActivity %d has no activity name", id)));
	if (strlen(sa->name) > DEX_NAME_MAX_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("activity name of command scheduleActivity %d must have at most %d bytes",
						id, DEX_NAME_MAX_LEN)));
	if (sa->priority < 0 || sa->priority > 100)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("priority of activity %d must be between 0 and 100", id)));
	/* positive, or unset */
	if (!duration_ok(sa->start_to_close_timeout, 1) ||
		!duration_ok(sa->heartbeat_timeout, 1) ||
		!duration_ok(sa->schedule_to_close_timeout, 1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the timeouts of activity %d must be positive and at most 100 years", id)));
}

static void
check_start_timer(const Dex__V1__Command *cmd)
{
	const Dex__V1__StartTimer *st = cmd->start_timer;

	require_positive_id(cmd);
	if (st->delay == NULL || !duration_ok(st->delay, 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timer %d needs a delay between 0 and 100 years", cmd->id)));
}

/* A timer the run started has a positive id; commands_apply.c checks the run started it */
static void
check_cancel_timer(const Dex__V1__Command *cmd)
{
	int32		timer = cmd->cancel_timer->timer_created_event_id;

	if (timer <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command cancelTimer names timer %d, which the run did not start", timer)));
}

static void
check_wait_external_event(const Dex__V1__Command *cmd)
{
	const Dex__V1__WaitExternalEvent *w = cmd->wait_external_event;
	int32		id = cmd->id;

	require_positive_id(cmd);
	if (w->event_id == NULL || w->event_id[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command waitExternalEvent %d needs an event id", id)));
	/* dex.send_external_event takes no longer ids: the wait could not end */
	if (strlen(w->event_id) > DEX_NAME_MAX_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command waitExternalEvent %d has an event id of more than %d bytes", id, DEX_NAME_MAX_LEN)));
	if (!duration_ok(w->timeout, 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the timeout of waitExternalEvent %d must be between 0 and 100 years", id)));
}

/* A child run's priority 0 and version 0 mean "not set": the parent's priority, version 1 */
static void
check_start_child_run(const Dex__V1__Command *cmd)
{
	const Dex__V1__StartChildRun *sc = cmd->start_child_run;
	int32		id = cmd->id;

	require_positive_id(cmd);
	if (sc->workflow_name == NULL || sc->workflow_name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command startChildRun %d has no workflow name", id)));
	/* as dex.create_run checks them */
	if (strlen(sc->workflow_name) > DEX_NAME_MAX_LEN ||
		(sc->instance_id != NULL && strlen(sc->instance_id) > DEX_NAME_MAX_LEN) ||
		(sc->concurrency_key != NULL && strlen(sc->concurrency_key) > DEX_NAME_MAX_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("workflow name, instance id and concurrency key of child run %d must have at most %d bytes", id, DEX_NAME_MAX_LEN)));
	if (sc->workflow_version < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("workflow version of child run %d must be positive", id),
				 errdetail("The version was %d.", sc->workflow_version)));
	if (sc->priority < 0 || sc->priority > 100)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("priority of child run %d must be between 0 and 100", id)));
	if (!duration_ok(sc->execution_timeout, 1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the execution timeout of child run %d must be between 1 ms and 100 years", id)));
	if (sc->parent_close_policy < DEX__V1__PARENT_CLOSE_POLICY__PARENT_CLOSE_POLICY_UNSPECIFIED ||
		sc->parent_close_policy > DEX__V1__PARENT_CLOSE_POLICY__PARENT_CLOSE_POLICY_ABANDON)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("child run %d has an unknown parent close policy %d", id,
						(int) sc->parent_close_policy)));
}

/* A run id in its canonical text form: 8-4-4-4-12 hex digits */
static bool
run_id_text_ok(const char *s)
{
	if (strlen(s) != 36)
		return false;
	for (int i = 0; i < 36; i++)
	{
		if (i == 8 || i == 13 || i == 18 || i == 23)
		{
			if (s[i] != '-')
				return false;
		}
		else if (!isxdigit((unsigned char) s[i]))
			return false;
	}
	return true;
}

/*
 * Signalling another run: exactly one of a run id (a uuid, no queue) and an
 * instance id (with a queue, or this run's), and an event id as
 * dex.send_external_event takes it.
 */
/*
 * Event ids that start with "user:" are those of the user tasks of workflows
 * defined in JSON: only dex.complete_user_task sends them, after its checks
 * (a user task completed once, its row gone), so no one sends them past it.
 */
void
dex_check_event_id_not_reserved(const char *event_id)
{
	if (strncmp(event_id, "user:", 5) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event id \"%s\" is reserved", event_id),
				 errdetail("Event ids that start with \"user:\" complete the user tasks of workflows defined in JSON."),
				 errhint("Complete a user task with dex.complete_user_task.")));
}

static void
check_signal_external_run(const Dex__V1__Command *cmd)
{
	const Dex__V1__SignalExternalRun *se = cmd->signal_external_run;
	bool		by_run = se->run_id != NULL && se->run_id[0] != '\0';
	bool		by_instance = se->instance_id != NULL && se->instance_id[0] != '\0';
	bool		has_queue = se->queue != NULL && se->queue[0] != '\0';
	int32		id = cmd->id;

	require_positive_id(cmd);
	if (by_run == by_instance)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command signalExternalRun %d needs exactly one of runId and instanceId", id)));
	if (se->event_id == NULL || se->event_id[0] == '\0' || strlen(se->event_id) > DEX_NAME_MAX_LEN ||
		(by_instance && strlen(se->instance_id) > DEX_NAME_MAX_LEN) ||
		(has_queue && strlen(se->queue) > DEX_NAME_MAX_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command signalExternalRun %d needs an event id, and an instance id and queue if given, of 1 to %d bytes",
						id, DEX_NAME_MAX_LEN)));
	dex_check_event_id_not_reserved(se->event_id);
	if (by_run && !run_id_text_ok(se->run_id))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command signalExternalRun %d has run id \"%s\", which is not a uuid", id, se->run_id)));
	if (by_run && has_queue)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command signalExternalRun %d names a run id and a queue", id),
				 errdetail("A queue tells instance ids apart; a run id needs none.")));
}

/* One command, by its kind */
static void
check_command(const Dex__V1__Command *cmd)
{
	switch (cmd->kind_case)
	{
		case DEX__V1__COMMAND__KIND_SCHEDULE_ACTIVITY:
			check_schedule_activity(cmd);
			break;
		case DEX__V1__COMMAND__KIND_START_TIMER:
			check_start_timer(cmd);
			break;
		case DEX__V1__COMMAND__KIND_CANCEL_TIMER:
			check_cancel_timer(cmd);
			break;
		case DEX__V1__COMMAND__KIND_WAIT_EXTERNAL_EVENT:
			check_wait_external_event(cmd);
			break;
		case DEX__V1__COMMAND__KIND_START_CHILD_RUN:
			check_start_child_run(cmd);
			break;
		case DEX__V1__COMMAND__KIND_RECORD_SIDE_EFFECT:
			require_positive_id(cmd);
			break;
		case DEX__V1__COMMAND__KIND_RECORD_MARKER:
			require_positive_id(cmd);
			require_name(cmd, cmd->record_marker->name);
			break;
		case DEX__V1__COMMAND__KIND_PUBLISH_EVENT:
			require_positive_id(cmd);
			require_name(cmd, cmd->publish_event->name);
			break;
		case DEX__V1__COMMAND__KIND_SIGNAL_EXTERNAL_RUN:
			check_signal_external_run(cmd);
			break;
		case DEX__V1__COMMAND__KIND_FAIL_RUN:
			if (cmd->fail_run->failure == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("command failRun needs a failure")));
			break;
		case DEX__V1__COMMAND__KIND__NOT_SET:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("command %d has no kind", cmd->id),
					 errhint("Set exactly one of scheduleActivity, startTimer, cancelTimer, waitExternalEvent, startChildRun, recordSideEffect, recordMarker, publishEvent, signalExternalRun, setCustomStatus, completeRun, failRun, cancelRun, continueAsNew.")));
			break;
		default:
			/* setCustomStatus, completeRun, cancelRun, continueAsNew: nothing to check */
			break;
	}
}

/* A command came after completeRun, failRun, cancelRun or continueAsNew */
void
dex_refuse_command_after_end(const Dex__V1__Command *cmd)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("command %s follows the command that ended the run",
					dex_command_name(cmd)),
			 errdetail("completeRun, failRun, cancelRun and continueAsNew must be the last command.")));
}

/*
 * Check a workflow task's commands; raise ERRCODE_INVALID_PARAMETER_VALUE
 * for the first that is malformed.  Negative ids are looked for first, in
 * all commands: such a completion was not made by a workflow replaying its
 * history, and any other message would mislead.  The commands after a
 * continueAsNew are not checked (see the header comment).
 */
void
dex_check_commands(const Dex__V1__WorkflowTaskCompletion *completion)
{
	for (size_t i = 0; i < completion->n_commands; i++)
	{
		const Dex__V1__Command *cmd = completion->commands[i];

		if (cmd->id < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("command %s has negative id %d", dex_command_name(cmd), cmd->id),
					 errdetail("Command ids are positive event ids, or 0 for commands that create nothing.")));
	}

	for (size_t i = 0; i < completion->n_commands; i++)
	{
		const Dex__V1__Command *cmd = completion->commands[i];

		check_command(cmd);
		if (cmd->kind_case == DEX__V1__COMMAND__KIND_CONTINUE_AS_NEW)
			break;				/* what follows is commands_apply.c's to refuse */
		if (i + 1 < completion->n_commands &&
			(cmd->kind_case == DEX__V1__COMMAND__KIND_COMPLETE_RUN ||
			 cmd->kind_case == DEX__V1__COMMAND__KIND_FAIL_RUN ||
			 cmd->kind_case == DEX__V1__COMMAND__KIND_CANCEL_RUN))
			dex_refuse_command_after_end(completion->commands[i + 1]);
	}
}
