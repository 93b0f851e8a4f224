/** Connections: node-postgres clients made from a connection string or config (PG* variables otherwise). */
import pg from "pg";
import { DexError, NotSupported, serverError, sqlstate } from "./errors.js";

export type ConnectionOptions = string | pg.ClientConfig | undefined;

/** A connected client; a connection error while idle only marks it broken (no crash). */
export async function connect(options: ConnectionOptions, applicationName: string): Promise<pg.Client> {
  const config: pg.ClientConfig = typeof options === "string" ? { connectionString: options } : { ...(options ?? {}) };
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

/** Whether `e` is about the connection (lost, server shutting down) rather than the call. */
export function isConnectionError(e: unknown): boolean {
  const code = sqlstate(e);
  if (code === undefined) return true;
  return code.startsWith("08") || code === "57P01" || code === "57P02" || code === "57P03";
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
