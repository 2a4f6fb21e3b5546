// The one place a pg pool is configured. numeric stays a string (money is decimal end to end); bigint
// positions are parsed by the queries that read them, never globally, so no other int8 is silently narrowed.
import pg from 'pg';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

export function createPool(databaseUrl: string, options: { max?: number } = {}): pg.Pool {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: options.max ?? 10 });
  // An idle client that loses its connection emits 'error' on the pool; without a listener Node would crash
  // the process. The next checkout gets a fresh connection, so logging nothing here loses nothing.
  pool.on('error', () => undefined);
  return pool;
}
