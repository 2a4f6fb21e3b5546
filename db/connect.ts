// The one place a pg pool is configured. numeric stays a string (money is decimal end to end); bigint
// positions are parsed by the queries that read them, never globally, so no other int8 is silently narrowed.
import pg from 'pg';
import { sessionParameters, type SessionBounds } from './session-settings.js';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

export interface PoolOptions {
  max?: number;
  /** Server-enforced bounds on lock waits, statements and idle transactions (none when omitted). */
  bounds?: SessionBounds;
  /** Told once when connections start failing (a restart, a lost server), and again when one succeeds. */
  onConnectionLost?: (error: Error) => void;
  onConnectionRestored?: () => void;
}

export function createPool(databaseUrl: string, options: PoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max: options.max ?? 10,
    ...(options.bounds ? sessionParameters(options.bounds) : {}),
  });
  let lost = false;
  const connectionFailed = (error: Error): void => {
    if (lost) return;
    lost = true;
    options.onConnectionLost?.(error);
  };
  // A client whose connection breaks emits 'error'; without a listener Node ends the process. The pool listens
  // only while a client is idle, so every client gets its own listener for its whole life, checked out or not.
  // The query in flight (if any) rejects with the same error and its caller handles it; the broken client is
  // discarded on release and the next checkout connects afresh.
  pool.on('connect', (client) => {
    client.on('error', connectionFailed);
    if (lost) {
      lost = false;
      options.onConnectionRestored?.();
    }
  });
  // The pool re-emits an idle client's error: already reported by the client's own listener.
  pool.on('error', () => undefined);
  return pool;
}
