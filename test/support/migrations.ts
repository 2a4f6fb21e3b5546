// A database migrated as it was before a given migration: what a migration test fills with the rows an older
// release wrote, before it runs the rest with db/migrate.ts.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate as drizzleMigrate } from 'drizzle-orm/node-postgres/migrator';
import type pg from 'pg';
import { MIGRATIONS_FOLDER } from '../../db/migrate.js';

/** Applies the committed migrations whose tag sorts before `tag` (e.g. '0007'): the same files, the journal cut. */
export async function migrateBefore(pool: pg.Pool, tag: string): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), `whalehunt-migrations-before-${tag}-`));
  try {
    cpSync(MIGRATIONS_FOLDER, dir, { recursive: true });
    const journalPath = join(dir, 'meta', '_journal.json');
    const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: { tag: string }[] };
    journal.entries = journal.entries.filter((entry) => entry.tag < tag);
    writeFileSync(journalPath, JSON.stringify(journal));
    await drizzleMigrate(drizzle(pool), { migrationsFolder: dir });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
