/*-------------------------------------------------------------------------
 *
 * wire/wire.h
 *	  The protocol (proto/dex/v1): the codec of every message (codec.h), the
 *	  values dex converts to and from SQL, and event constructors.  Knows
 *	  nothing of tables.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_WIRE_WIRE_H
#define DEX_WIRE_WIRE_H

#include "postgres.h"

#include "datatype/timestamp.h"

#include "util/util.h"
#include "wire/codec.h"

/* values.c */
extern Google__Protobuf__Timestamp *dex_pb_timestamp(TimestampTz ts);
extern TimestampTz dex_timestamp_from_pb(const Google__Protobuf__Timestamp *ts);
extern Dex__V1__Payload *dex_payload_from_jsonb(Jsonb *value);
extern Dex__V1__Payload *dex_payload_from_bytea(bytea *data, const char *what);
extern Dex__V1__Payload *dex_payload_unpack(bytea *data, const char *what);
extern Jsonb *dex_payload_to_jsonb(const Dex__V1__Payload *payload);

/*
 * events.c: the events dex records, one constructor per kind, with id 0 (see
 * events.c), and the failures dex reports itself
 */
extern Dex__V1__WorkflowEvent *dex_inbox_event_unpack(bytea *data);
extern Dex__V1__WorkflowEvent *dex_new_event(int32 id, TimestampTz ts);
extern Dex__V1__Failure *dex_new_failure(const char *message, const char *type, bool terminal);
extern Dex__V1__WorkflowEvent *dex_event_workflow_task_started(TimestampTz ts, char *worker_id);
extern Dex__V1__WorkflowEvent *dex_event_workflow_task_completed(TimestampTz ts);
extern Dex__V1__WorkflowEvent *dex_event_run_created(TimestampTz ts, Dex__V1__RunCreated *subject);
extern Dex__V1__WorkflowEvent *dex_event_run_started(TimestampTz ts);
extern Dex__V1__WorkflowEvent *dex_event_run_completed(TimestampTz ts, Dex__V1__Payload *result);
extern Dex__V1__WorkflowEvent *dex_event_run_failed(TimestampTz ts, Dex__V1__Failure *failure);
extern Dex__V1__WorkflowEvent *dex_event_run_cancel_requested(TimestampTz ts, char *reason, char *by);
extern Dex__V1__WorkflowEvent *dex_event_run_cancelled(TimestampTz ts, char *reason, char *by);
extern Dex__V1__WorkflowEvent *dex_event_run_terminated(TimestampTz ts, char *reason, char *by);
extern Dex__V1__WorkflowEvent *dex_event_run_timed_out(TimestampTz ts, TimestampTz deadline);
extern Dex__V1__WorkflowEvent *dex_event_run_suspended(TimestampTz ts, char *reason, char *by);
extern Dex__V1__WorkflowEvent *dex_event_run_resumed(TimestampTz ts, char *reason, char *by);
extern Dex__V1__WorkflowEvent *dex_event_run_continued_as_new(TimestampTz ts,
															   Dex__V1__Payload *argument,
															   int32 generation);
extern Dex__V1__WorkflowEvent *dex_event_custom_status_set(TimestampTz ts, char *custom_status);
extern Dex__V1__WorkflowEvent *dex_event_marker_recorded(TimestampTz ts, char *name,
														 Dex__V1__Payload *details);
extern Dex__V1__WorkflowEvent *dex_event_event_published(TimestampTz ts, char *name,
														   Dex__V1__Payload *payload);
extern Dex__V1__WorkflowEvent *dex_event_side_effect_executed(TimestampTz ts, char *name,
															   Dex__V1__Payload *result);
extern Dex__V1__WorkflowEvent *dex_event_activity_task_created(TimestampTz ts,
																const Dex__V1__ScheduleActivity *command);
extern Dex__V1__WorkflowEvent *dex_event_activity_task_completed(TimestampTz ts, int32 created_event_id,
																  Dex__V1__Payload *result,
																  int32 attempt);
extern Dex__V1__WorkflowEvent *dex_event_activity_task_failed(TimestampTz ts, int32 created_event_id,
															   Dex__V1__Failure *failure,
															   int32 attempts);
extern Dex__V1__WorkflowEvent *dex_event_timer_created(TimestampTz ts, char *name,
														TimestampTz elapse_at);
extern Dex__V1__WorkflowEvent *dex_event_timer_elapsed(TimestampTz ts, int32 timer_created_event_id);
extern Dex__V1__WorkflowEvent *dex_event_timer_cancelled(TimestampTz ts, int32 timer_created_event_id);
extern Dex__V1__WorkflowEvent *dex_event_external_event_wait_started(TimestampTz ts, char *event_id,
																	  const TimestampTz *timeout_at);
extern Dex__V1__WorkflowEvent *dex_event_external_event_received(TimestampTz ts, char *event_id,
																  Dex__V1__Payload *payload);
extern Dex__V1__WorkflowEvent *dex_event_external_run_signalled(TimestampTz ts,
																 const Dex__V1__SignalExternalRun *command,
																 char *run_id,
																 Dex__V1__SignalOutcome outcome);
extern Dex__V1__WorkflowEvent *dex_event_external_run_signal_result(TimestampTz ts,
																	 int32 signalled_event_id,
																	 char *run_id,
																	 Dex__V1__SignalOutcome outcome);
extern Dex__V1__WorkflowEvent *dex_event_child_run_created(TimestampTz ts,
															const Dex__V1__StartChildRun *command,
															int32 workflow_version, char *queue,
															int32 priority);
extern Dex__V1__WorkflowEvent *dex_event_child_run_completed(TimestampTz ts, int32 created_event_id,
															  Dex__V1__Payload *result);
extern Dex__V1__WorkflowEvent *dex_event_child_run_failed(TimestampTz ts, int32 created_event_id,
														   Dex__V1__Failure *failure);

#endif							/* DEX_WIRE_WIRE_H */
