// The one place a pg pool is configured. numeric stays a string (money is decimal end to end); bigint
// positions are parsed by the queries that read them, never globally, so no other int8 is silently narrowed.
import pg from 'pg';
import { isConnectionLoss } from './errors.js';
import { sessionParameters, type SessionBounds } from './session-settings.js';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

export interface PoolOptions {
  max?: number;
  /** Server-enforced bounds on lock waits, statements and idle transactions (none when omitted). */
  bounds?: SessionBounds;
  /**
   * Told once when the database is lost: a connection breaks (idle, or under a query in flight, e.g. a commit) or
   * a new one is refused. Then not again until `onConnectionRestored`, told at the next connection that succeeds
   * with how long the database was away: one pair per outage, however many runs and connections saw it.
   */
  onConnectionLost?: (error: Error) => void;
  onConnectionRestored?: (downMs: number) => void;
}

type ConnectCallback = (
  error: Error | undefined,
  client: pg.PoolClient | undefined,
  done: (release?: unknown) => void,
) => void;

export function createPool(databaseUrl: string, options: PoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max: options.max ?? 10,
    ...(options.bounds ? sessionParameters(options.bounds) : {}),
  });
  let lostAt: number | null = null;
  const lost = (error: Error): void => {
    if (lostAt !== null) return;
    lostAt = Date.now();
    options.onConnectionLost?.(error);
  };
  const maybeLost = (error: unknown): void => {
    if (error instanceof Error && isConnectionLoss(error)) lost(error);
  };
  // A client whose connection breaks while idle emits 'error'; without a listener Node ends the process. The pool
  // listens only while a client is idle, so every client gets its own listener for its whole life, checked out or
  // not. The query in flight (if any) rejects with the same error and its caller handles it; the broken client is
  // discarded on release and the next checkout connects afresh.
  pool.on('connect', (client) => {
    client.on('error', lost);
    if (lostAt === null) return;
    const downMs = Date.now() - lostAt;
    lostAt = null;
    options.onConnectionRestored?.(downMs);
  });
  // A query in flight takes the error instead of the client (no 'error' event): pool.query and inTransaction
  // release the client with it, so a commit that loses its connection is seen here.
  pool.on('release', (error: unknown) => maybeLost(error));
  // The pool re-emits an idle client's error: already reported by the client's own listener.
  pool.on('error', () => undefined);
  // A connection refused (the database is down, restarting or starting up) fails the checkout and emits nothing:
  // pool.query checks out through this too.
  const connect = pool.connect.bind(pool) as (callback?: ConnectCallback) => Promise<pg.PoolClient> | undefined;
  pool.connect = ((callback?: ConnectCallback) => {
    if (callback) {
      return connect((error, client, done) => {
        maybeLost(error);
        callback(error, client, done);
      });
    }
    return connect()!.catch((error: unknown) => {
      maybeLost(error);
      throw error;
    });
  }) as typeof pool.connect;
  return pool;
}

/** Whether the server at `url` accepts a connection now (what pg_isready asks); never throws. */
export async function acceptsConnections(url: string, timeoutMs: number): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: timeoutMs });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}
