/*-------------------------------------------------------------------------
 *
 * locks.c
 *	  dex's own heavyweight locks: the rebuild lock and the capacity lock of a
 *	  queue's polls.
 *
 * Both are transaction-level locks in PostgreSQL's lock manager, so they are
 * released by commit and abort, take part in deadlock detection and show in
 * pg_locks.  Their tags are object tags whose class id is the oid of the
 * table dex.lease (objid, objsubid as below).  That is what makes them dex's
 * own: SQL takes advisory locks (any role may take any key), relation locks
 * (any role may take ACCESS SHARE on any table by oid, pg_relation_size does)
 * and locks on catalogued objects, whose class id is a system catalog's; no
 * statement takes an object lock whose class is a user table.  So no role,
 * however unprivileged, can hold one of these locks and stall dex's callers.
 *
 *	  rebuild lock (objid 0, objsubid 1): every API call that writes task
 *		tables takes it in SHARE mode before it does; the scheduler's rebuild
 *		of the task tables after a crash takes it EXCLUSIVE (rebuild.c).
 *	  capacity lock (objid = queue id, objsubid 2): a poll of a queue with a
 *		capacity takes it EXCLUSIVE before it counts the leases, so two polls
 *		cannot both see the same room (api/api_poll.c); polls of queues without a
 *		capacity take none.
 *
 * Unlike the relation locks they replace, object locks never take the lock
 * manager's fast path: each costs a lookup in a shared lock table partition
 * (about a microsecond), once per API transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/lsyscache.h"

#include "engine/engine.h"

#define REBUILD_LOCK_SUBID 1
#define CAPACITY_LOCK_SUBID 2

/* The class id of dex's locks: the oid of dex.lease. */
static Oid
lock_class(void)
{
	Oid			relid = get_relname_relid("lease", get_namespace_oid("dex", false));

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"dex.lease\" does not exist"),
				 errhint("Reinstall the extension with DROP EXTENSION dex and CREATE EXTENSION dex.")));
	return relid;
}

static void
lock_dex_object(uint32 objid, uint16 objsubid, LOCKMODE mode)
{
	LOCKTAG		tag;

	SET_LOCKTAG_OBJECT(tag, MyDatabaseId, lock_class(), objid, objsubid);
	(void) LockAcquire(&tag, mode, false, false);
}

/*
 * Called by every API function that writes task tables, before it does:
 * waits for a rebuild in progress and keeps the next one out until this
 * transaction ends.
 */
void
dex_wait_for_rebuild(void)
{
	lock_dex_object(0, REBUILD_LOCK_SUBID, ShareLock);
}

/* The scheduler's rebuild: waits for the API writers in flight, holds back new ones. */
void
dex_lock_for_rebuild(void)
{
	lock_dex_object(0, REBUILD_LOCK_SUBID, ExclusiveLock);
}

/* A poll of a queue with a capacity, until the end of its transaction. */
void
dex_lock_queue_polls(int32 queue_id)
{
	lock_dex_object((uint32) queue_id, CAPACITY_LOCK_SUBID, ExclusiveLock);
}
