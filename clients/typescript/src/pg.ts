/** Connections: node-postgres clients made from a connection string or config (PG* variables otherwise). */
import pg from "pg";
import { DexError, NotSupported, serverError, sqlstate } from "./errors.js";

export type ConnectionOptions = string | pg.ClientConfig | undefined;

function clientConfig(options: ConnectionOptions): pg.ClientConfig {
  return typeof options === "string" ? { connectionString: options } : { ...(options ?? {}) };
}

/** A connected client; a connection error while idle only marks it broken (no crash). */
export async function connect(options: ConnectionOptions, applicationName: string): Promise<pg.Client> {
  const config = clientConfig(options);
  config.application_name ??= applicationName.slice(0, 63);
  const client = new pg.Client(config);
  client.on("error", () => {
    (client as Broken).dexBroken = true;
  });
  await client.connect();
  return client;
}

type Broken = pg.Client & { dexBroken?: boolean };

export function isBroken(client: pg.Client): boolean {
  return (client as Broken).dexBroken === true;
}

export async function closeQuietly(client: pg.Client | undefined): Promise<void> {
  if (!client) return;
  try {
    await client.end();
  } catch {
    /* already gone */
  }
}

/**
 * Whether the connection goes through a connection pooler: a pooler gives its clients process
 * ids and cancel keys of its own (PgBouncer does), so the one the connection was given is not
 * the backend's that runs its statements.
 */
export async function behindPooler(client: pg.Client): Promise<boolean> {
  const res = await client.query("SELECT pg_catalog.pg_backend_pid() AS pid");
  return res.rows[0].pid !== (client as unknown as { processID: number }).processID;
}

/**
 * Cancel the statement `client` runs with the protocol's cancel request, on a connection of its
 * own (a pooler forwards it to the server connection it lent, where pg_cancel_backend would
 * need the backend's pid); nothing if it runs none.
 */
export function cancelQuery(options: ConnectionOptions, client: pg.Client): void {
  const active = (client as unknown as { activeQuery?: unknown }).activeQuery;
  if (!active) return;
  const canceller = new pg.Client(clientConfig(options)) as unknown as
    { connection: { on(event: string, fn: () => void): void }; cancel(c: pg.Client, q: unknown): void };
  canceller.connection.on("error", () => { /* the server closes it: the request was sent or the cancel is moot */ });
  canceller.cancel(client, active);
}

/**
 * Whether `e` says that a named prepared statement of the connection is missing on the server
 * connection that ran the call (26000), or that another one has its name there (42P05): a
 * pooler in transaction mode lent another server connection.  The call did not run.
 */
export function isPreparedStatementError(e: unknown): boolean {
  const code = sqlstate(e);
  return code === "26000" || code === "42P05";
}

export const POOLER_HINT = "the connection seems to go through a connection pooler in transaction pooling mode, " +
  "where named prepared statements do not work: give the worker pooled: true (or leave pooled out: it is detected)";

/**
 * Whether `e` is about the connection (lost, server shutting down, a prepared statement the
 * server connection of a pooler lacks) rather than the call: the call did not run, or its
 * outcome is unknown; a new connection is the way on.
 */
export function isConnectionError(e: unknown): boolean {
  const code = sqlstate(e);
  if (code === undefined) return true;
  return code.startsWith("08") || code === "57P01" || code === "57P02" || code === "57P03" || isPreparedStatementError(e);
}

/** An error of a call as the SDK's typed error: a ServerError by its SQLSTATE; the SDK's own errors as they are. */
export function translate(e: unknown): unknown {
  return e instanceof DexError ? e : serverError(e);
}

/** Whether the installed dex has all these routines (to_regprocedure signatures). */
export async function hasRoutines(client: pg.Client, ...signatures: string[]): Promise<boolean> {
  const sql = "SELECT " + signatures.map((_, i) => `to_regprocedure($${i + 1}) IS NOT NULL`).join(" AND ") + " AS ok";
  const res = await client.query(sql, signatures);
  return res.rows[0].ok === true;
}

export function notSupported(what: string): DexError {
  return new NotSupported(`the installed dex has no ${what}: this SDK needs dex 1.5 or later (ALTER EXTENSION dex UPDATE)`);
}
