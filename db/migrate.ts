// Applies db/migrations with drizzle's migrator. Several workers (and parallel test files) may start at
// once: a session-level advisory lock held on the migrating connection makes them take turns, and the
// migrator skips what its journal table says is applied, so every caller after the first is a no-op.
import { fileURLToPath } from 'node:url';
import { DrizzleQueryError } from 'drizzle-orm/errors';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate as drizzleMigrate } from 'drizzle-orm/node-postgres/migrator';
import type pg from 'pg';
import { toStorageFailure } from './transaction.js';

export const MIGRATIONS_FOLDER = fileURLToPath(new URL('./migrations', import.meta.url));

/** Arbitrary constant shared by every process that migrates this schema. */
const MIGRATION_LOCK_KEY = 7_201_310_555;

export async function migrate(pool: pg.Pool): Promise<void> {
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    throw toStorageFailure('migrate', undefined, error);
  }
  try {
    // A migration may rewrite a large table, and the next worker waits here for the first one to finish: the
    // pool's lock and statement bounds (sized for commits) do not apply. The connection is discarded after.
    await client.query('SET lock_timeout = 0; SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0');
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      await drizzleMigrate(drizzle(client), { migrationsFolder: MIGRATIONS_FOLDER });
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
    }
  } catch (error) {
    // drizzle wraps the database's error in one whose message is the whole migration's text: report the
    // database's own (its SQLSTATE, and what a migration's check says is wrong).
    throw toStorageFailure('migrate', undefined, error instanceof DrizzleQueryError ? error.cause : error);
  } finally {
    client.release(true);
  }
}
