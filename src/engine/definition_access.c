/*-------------------------------------------------------------------------
 *
 * definition_access.c
 *	  Who may start runs of a workflow defined in JSON (1.9), and which
 *	  (definition, version) pairs exist, from a cache of dex.definition and
 *	  dex.definition_grant kept by each backend.
 *
 * A run of a definition runs its SQL steps with the privileges of the
 * definition's owner and the variables its starter chose: starting one is
 * like calling a SECURITY DEFINER function, so it takes a privilege.  A
 * role may start runs of definition N when it is a superuser, a member of
 * the owner of the version it starts, or a member of a role granted N
 * (dex.grant_definition).  Checked for the caller by dex.create_run(s), by
 * the startChildRun command (a worker's child), by dex.create_schedule and
 * dex.alter_schedule (for the runs the schedule will start), and, for the
 * calling definition's owner, by call steps (interpret.c).  A refusal is
 * 42501 and the call writes nothing.  Runs of a name that is a definition's
 * but of a version it does not have are refused too (42704): no interpreter
 * would ever run them.  Up to schema 1.8 (no grants table) anyone who may
 * use the queue may start them, as before.
 *
 * The cache holds every definition name with its versions and their owners,
 * and the grants; it is loaded by two statements on first use, and again
 * after any change: the functions that change either table send a relcache
 * invalidation of dex.definition (dex_definitions_changed), which reaches
 * every backend at commit, and this one at its next command.  So starting a
 * run of a workflow of an SDK costs a hash probe, no statement.  (A
 * superuser's own writes to those tables send none: a session sees them
 * when it next loads the cache.)  Loaded under a transaction snapshot
 * (REPEATABLE READ, SERIALIZABLE), which may predate a change whose
 * invalidation it received, it serves that transaction only; an error while
 * loading leaves it to be loaded again.  Runs in the caller's transaction
 * and SPI connection.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "engine/engine.h"

typedef struct DefinitionEntry
{
	char		name[DEX_NAME_MAX_LEN + 1]; /* the key */
	int			n_versions;
	int32	   *versions;
	Oid		   *owners;			/* of each version */
	int			n_grants;
	Oid		   *grantees;
} DefinitionEntry;

static HTAB *definitions = NULL;
static MemoryContext cache_context = NULL;
static bool cache_valid = false;
static bool grants_exist = false;	/* the schema has dex.definition_grant (1.9) */
static Oid	definition_relid = InvalidOid;
/* the transaction the cache serves, when it serves one only (see load_definitions) */
static LocalTransactionId cache_lxid = InvalidLocalTransactionId;

static DexPlan load_definitions_plan = {
	"SELECT name, version, owner::oid FROM dex.definition ORDER BY name, version",
	0, {0}
};

static DexPlan load_grants_plan = {
	"SELECT name, role::oid FROM dex.definition_grant ORDER BY name",
	0, {0}
};

/* Any change of dex.definition (or a reset of the relcache) voids the cache */
static void
definitions_invalidated(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == definition_relid)
		cache_valid = false;
}

static DefinitionEntry *
entry_for(const char *name, bool create)
{
	char		key[DEX_NAME_MAX_LEN + 1];
	bool		found;
	DefinitionEntry *e;

	memset(key, 0, sizeof(key));
	strlcpy(key, name, sizeof(key));
	e = hash_search(definitions, key, create ? HASH_ENTER : HASH_FIND, &found);
	if (create && !found)
	{
		e->n_versions = 0;
		e->versions = NULL;
		e->owners = NULL;
		e->n_grants = 0;
		e->grantees = NULL;
	}
	return e;
}

static void fill_cache(void);

/*
 * The cache, loaded again if a change voided it.  Loaded under REPEATABLE
 * READ or SERIALIZABLE, whose snapshot may predate a change whose
 * invalidation has arrived, it serves that transaction only.
 */
static void
load_definitions(void)
{
	Oid			schema = get_namespace_oid("dex", false);

	if (cache_valid && cache_lxid != InvalidLocalTransactionId && cache_lxid != MyProc->lxid)
		cache_valid = false;
	if (cache_valid)
		return;
	if (cache_context == NULL)
	{
		cache_context = AllocSetContextCreate(TopMemoryContext, "dex definitions",
											  ALLOCSET_SMALL_SIZES);
		CacheRegisterRelcacheCallback(definitions_invalidated, (Datum) 0);
	}
	MemoryContextReset(cache_context);
	definitions = NULL;
	definition_relid = get_relname_relid("definition", schema);
	grants_exist = dex_definition_grants_exist();
	/* valid from now on: an invalidation while loading voids it again, and so does an error */
	cache_valid = true;
	cache_lxid = IsolationUsesXactSnapshot() ? MyProc->lxid : InvalidLocalTransactionId;
	PG_TRY();
	{
		fill_cache();
	}
	PG_CATCH();
	{
		cache_valid = false;
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* Fill the emptied cache (load_definitions) */
static void
fill_cache(void)
{
	HASHCTL		ctl;
	DexRows		rows;
	MemoryContext old;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = DEX_NAME_MAX_LEN + 1;
	ctl.entrysize = sizeof(DefinitionEntry);
	ctl.hcxt = cache_context;
	definitions = hash_create("dex definitions", 64, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	if (!OidIsValid(definition_relid))
		return;					/* before 1.7 */

	rows = dex_spi_rows(&load_definitions_plan, NULL, NULL, 0);
	old = MemoryContextSwitchTo(cache_context);
	for (uint64 r = 0; r < rows.n; r++)
	{
		bool		isnull;
		DefinitionEntry *e = entry_for(dex_rows_gettext_copy(rows, r, 1), true);

		/* the rows come by name: a name's versions are consecutive, few */
		if (e->n_versions == 0)
		{
			e->versions = palloc(sizeof(int32) * 4);
			e->owners = palloc(sizeof(Oid) * 4);
		}
		else if (e->n_versions % 4 == 0)
		{
			e->versions = repalloc(e->versions, sizeof(int32) * (e->n_versions + 4));
			e->owners = repalloc(e->owners, sizeof(Oid) * (e->n_versions + 4));
		}
		e->versions[e->n_versions] = (int32) dex_rows_getint64(rows, r, 2);
		e->owners[e->n_versions++] = DatumGetObjectId(dex_rows_getdatum(rows, r, 3, &isnull));
	}
	MemoryContextSwitchTo(old);
	if (!grants_exist)
		return;
	rows = dex_spi_rows(&load_grants_plan, NULL, NULL, 0);
	old = MemoryContextSwitchTo(cache_context);
	for (uint64 r = 0; r < rows.n; r++)
	{
		bool		isnull;
		DefinitionEntry *e = entry_for(dex_rows_gettext_copy(rows, r, 1), true);

		if (e->n_grants == 0)
			e->grantees = palloc(sizeof(Oid) * 4);
		else if (e->n_grants % 4 == 0)
			e->grantees = repalloc(e->grantees, sizeof(Oid) * (e->n_grants + 4));
		e->grantees[e->n_grants++] = DatumGetObjectId(dex_rows_getdatum(rows, r, 2, &isnull));
	}
	MemoryContextSwitchTo(old);
}

/* Whether role acts as owner: a superuser or a member of it */
static bool
acts_as(Oid role, Oid owner)
{
	return superuser_arg(role) || has_privs_of_role(role, owner);
}

/* Whether role may start runs of version i of definition e (see the header) */
static bool
may_start(const DefinitionEntry *e, int i, Oid role)
{
	if (!grants_exist || acts_as(role, e->owners[i]))
		return true;
	for (int g = 0; g < e->n_grants; g++)
		if (has_privs_of_role(role, e->grantees[g]))
			return true;
	return false;
}

/*
 * Refuse to start a run of workflow "name" version "version" for role when
 * it is a definition's name and the version does not exist (42704) or the
 * role may not start it (42501).  Workflows of SDKs pass at the cost of a
 * hash probe.
 */
void
dex_check_definition_start(const char *name, int32 version, Oid role)
{
	DefinitionEntry *e;
	int			i;

	load_definitions();
	e = entry_for(name, false);
	if (e == NULL || e->n_versions == 0)
		return;
	for (i = 0; i < e->n_versions; i++)
		if (e->versions[i] == version)
			break;
	if (i == e->n_versions)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("definition \"%s\" has no version %d", name, version),
				 errdetail("Its latest version is %d; no interpreter would run this one.",
						   e->versions[e->n_versions - 1]),
				 errhint("Start a version it has, or create this one with dex.create_definition.")));
	if (!may_start(e, i, role))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to start runs of definition \"%s\"", name),
				 errdetail("Its runs run SQL with the privileges of role %s.",
						   GetUserNameFromId(e->owners[i], false)),
				 errhint("A member of its owner grants it with dex.grant_definition('%s', role).", name)));
}

/*
 * Refuse (42501) a role that does not act as the owner of every version of
 * definition "name" (none: 42704), for "action": grants, and new versions,
 * are the owners' to give, since a grant names every version.
 */
void
dex_check_owns_definition(const char *name, Oid role, const char *action)
{
	DefinitionEntry *e;

	load_definitions();
	e = entry_for(name, false);
	if (e == NULL || e->n_versions == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("definition \"%s\" does not exist", name)));
	for (int i = 0; i < e->n_versions; i++)
		if (!acts_as(role, e->owners[i]))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to %s definition \"%s\"", action, name),
					 errdetail("It belongs to role %s; role %s is not a member of it.",
							   GetUserNameFromId(e->owners[i], false), GetUserNameFromId(role, false))));
}

/* Whether the schema has grants of definitions (1.9) */
bool
dex_definition_grants_exist(void)
{
	Oid			schema = get_namespace_oid("dex", true);

	return OidIsValid(schema) && OidIsValid(get_relname_relid("definition_grant", schema));
}

/* Whether "name" names a definition (of any version) */
bool
dex_is_definition(const char *name)
{
	DefinitionEntry *e;

	load_definitions();
	e = entry_for(name, false);
	return e != NULL && e->n_versions > 0;
}

/*
 * dex.definition or dex.definition_grant changed in this transaction: every
 * backend's cache is voided when it commits (this backend's at once).
 */
void
dex_definitions_changed(void)
{
	Oid			relid = get_relname_relid("definition", get_namespace_oid("dex", false));

	if (OidIsValid(relid))
		CacheInvalidateRelcacheByRelid(relid);
	cache_valid = false;
}

/* a definition of one of the roles $1 */
static DexPlan definition_of_owners_plan = {
	"SELECT name, version, owner::pg_catalog.oid FROM dex.definition "
	"WHERE owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.oid[]) "
	"ORDER BY name, version LIMIT 1",
	1, {OIDARRAYOID}
};

/*
 * DROP ROLE of a role that owns a definition in this database is refused
 * (2BP01), as PostgreSQL refuses to drop the owner of an object: the
 * definition's SQL steps would have no role to run as.  The definitions are
 * read with the rights of the table's owner (the role dropping may not read
 * them).  Other databases' definitions are not seen: there the interpreter
 * fails the runs of a definition whose owner is gone, saying so
 * (interpret.c).
 */
void
dex_refuse_dropping_definition_owners(List *roles)
{
	Oid			schema = get_namespace_oid("dex", true);
	Oid			relid;
	HeapTuple	tup;
	Oid			table_owner;
	Oid			user;
	int			sec;
	int			level;
	ArrayBuildState *oids;
	ListCell   *lc;
	bool		found = false;
	char	   *name = NULL;
	int32		version = 0;
	Oid			owner = InvalidOid;

	if (!OidIsValid(schema) || !OidIsValid(relid = get_relname_relid("definition", schema)))
		return;
	oids = initArrayResult(OIDOID, CurrentMemoryContext, false);
	foreach(lc, roles)
	{
		RoleSpec   *spec = lfirst(lc);
		Oid			role = spec->roletype == ROLESPEC_CSTRING ? get_role_oid(spec->rolename, true) : InvalidOid;

		if (OidIsValid(role))
			dex_array_add(oids, ObjectIdGetDatum(role), false);
	}
	if (oids->nelems == 0)
		return;
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		return;
	table_owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);

	/*
	 * As the table's owner, with search_path pinned: the session's path is
	 * the role dropping's to choose, and must resolve nothing here (an
	 * error's abort unwinds both).
	 */
	GetUserIdAndSecContext(&user, &sec);
	SetUserIdAndSecContext(table_owner, sec | SECURITY_LOCAL_USERID_CHANGE);
	level = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	SPI_connect();
	{
		Datum		values[1] = {dex_array_result(oids)};
		DexRows		rows = dex_spi_rows(&definition_of_owners_plan, values, NULL, 1);

		if (rows.n > 0)
		{
			bool		isnull;

			found = true;
			name = MemoryContextStrdup(TopTransactionContext, dex_rows_gettext_copy(rows, 0, 1));
			version = (int32) dex_rows_getint64(rows, 0, 2);
			owner = DatumGetObjectId(dex_rows_getdatum(rows, 0, 3, &isnull));
		}
	}
	SPI_finish();
	AtEOXact_GUC(true, level);
	SetUserIdAndSecContext(user, sec);
	if (found)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("role \"%s\" cannot be dropped because it owns workflow definition \"%s\" version %d",
						GetUserNameFromId(owner, false), name, version),
				 errdetail("The SQL steps of a definition run with its owner's privileges."),
				 errhint("Delete its definitions with dex.delete_definition first.")));
}
