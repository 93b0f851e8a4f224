/*-------------------------------------------------------------------------
 *
 * events.c
 *	  Constructors of the workflow events dex records.
 *
 * Every event has an id (its place in the run's history, 0 until the
 * recording assigns it) and a timestamp; the constructors here fill the
 * envelope and the subject, allocated in CurrentMemoryContext.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"


#include "wire/wire.h"

/* An event with no subject yet. */
Dex__V1__WorkflowEvent *
dex_new_event(int32 id, TimestampTz ts)
{
	Dex__V1__WorkflowEvent *event = palloc(sizeof(*event));

	dex__v1__workflow_event__init(event);
	event->id = id;
	event->timestamp = dex_pb_timestamp(ts);
	return event;
}
