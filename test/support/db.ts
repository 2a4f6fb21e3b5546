// A real, isolated Postgres database per test file.
//
//   import { useTestDatabase } from '../support/db.js';
//   const db = useTestDatabase();            // in a test file, at top level: registers beforeAll/afterEach/afterAll
//   it('…', async () => { await db.pool.query('…') });
//
// or by hand: `const db = await createTestDatabase(); … await db.drop();`.
//
// Each database is cloned (CREATE DATABASE … TEMPLATE) from a template that has the migrations applied once.
// The template's name carries a hash of the migration files, so a new migration builds a new template, and
// an advisory lock lets parallel test files build it exactly once. A file whose tests failed keeps its
// database for inspection (its name is printed; a run a day later drops it); a passing file drops it.
// DATABASE_URL (an admin connection) is honoured; default postgres://postgres@127.0.0.1:5432/test.
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { createPool } from '../../db/connect.js';
import { migrate, MIGRATIONS_FOLDER } from '../../db/migrate.js';

export const ADMIN_DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** Any constant: serialises template builds across the parallel test processes. */
const TEMPLATE_LOCK_KEY = 7_201_310_556;

/** Test databases are named `${TEST_DATABASE_PREFIX}<Date.now() in base 36>_<random>`. */
const TEST_DATABASE_PREFIX = 'whalehunt_test_';
/** A failing file's database is kept this long for inspection, then a later run drops it. */
const KEPT_DATABASE_MAX_AGE_MS = 24 * 60 * 60 * 1000;

export interface TestDatabase {
  pool: pg.Pool;
  url: string;
  name: string;
  /** Closes the pool and drops the database. */
  drop(): Promise<void>;
}

function urlFor(database: string): string {
  const url = new URL(ADMIN_DATABASE_URL);
  url.pathname = `/${database}`;
  return url.toString();
}

function migrationsHash(): string {
  const hash = createHash('sha256');
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else hash.update(entry.name).update(readFileSync(path));
    }
  };
  walk(MIGRATIONS_FOLDER);
  return hash.digest('hex').slice(0, 12);
}

async function withAdmin<T>(fn: (admin: pg.Client) => Promise<T>): Promise<T> {
  const admin = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.end();
  }
}

const quoteIdent = (name: string) => `"${name.replace(/"/g, '""')}"`;

/**
 * Drops test databases older than a day: kept ones of failed files would otherwise pile up on a machine that
 * runs the suite again and again (CI). Their age is read from the name, so a database a running file uses
 * is never touched.
 */
async function dropStaleTestDatabases(admin: pg.Client): Promise<void> {
  const { rows } = await admin.query<{ datname: string }>(
    'SELECT datname FROM pg_database WHERE starts_with(datname, $1)',
    [TEST_DATABASE_PREFIX],
  );
  const cutoff = Date.now() - KEPT_DATABASE_MAX_AGE_MS;
  for (const { datname } of rows) {
    const createdAt = parseInt(datname.slice(TEST_DATABASE_PREFIX.length).split('_')[0] ?? '', 36);
    if (createdAt < cutoff) await admin.query(`DROP DATABASE IF EXISTS ${quoteIdent(datname)} WITH (FORCE)`);
  }
}

/** Builds the migrated template once per migration set; later callers find it ready. */
async function ensureTemplate(admin: pg.Client): Promise<string> {
  const template = `whalehunt_tpl_${migrationsHash()}`;
  await admin.query('SELECT pg_advisory_lock($1)', [TEMPLATE_LOCK_KEY]);
  try {
    await dropStaleTestDatabases(admin);
    const exists = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [template]);
    if (exists.rowCount) return template;
    // Built under a scratch name and renamed when complete, so a crash mid-build never leaves a half template.
    const building = `${template}_build`;
    await admin.query(`DROP DATABASE IF EXISTS ${quoteIdent(building)} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${quoteIdent(building)}`);
    const pool = createPool(urlFor(building), { max: 1 });
    try {
      await migrate(pool);
    } finally {
      await pool.end();
    }
    await admin.query(`ALTER DATABASE ${quoteIdent(building)} RENAME TO ${quoteIdent(template)}`);
    return template;
  } finally {
    await admin.query('SELECT pg_advisory_unlock($1)', [TEMPLATE_LOCK_KEY]);
  }
}

export interface TestDatabaseOptions {
  poolMax?: number;
  migrated?: boolean;
  /**
   * The empty database's default collation is ICU's linguistic `en-US` (as a server initialised in en_US.UTF-8
   * has), not the server's own; only with `migrated: false`.
   */
  linguisticCollation?: boolean;
}

/** A fresh migrated database, cloned from the template; `migrated: false` gives an empty one (migrate's own tests). */
export async function createTestDatabase(options: TestDatabaseOptions = {}): Promise<TestDatabase> {
  const name = `${TEST_DATABASE_PREFIX}${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  await withAdmin(async (admin) => {
    if (options.migrated === false) {
      const collation = options.linguisticCollation ? " TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'" : '';
      await admin.query(`CREATE DATABASE ${quoteIdent(name)}${collation}`);
      return;
    }
    if (options.linguisticCollation) throw new Error('createTestDatabase: linguisticCollation needs migrated: false');
    const template = await ensureTemplate(admin);
    await admin.query(`CREATE DATABASE ${quoteIdent(name)} TEMPLATE ${quoteIdent(template)}`);
  });
  const url = urlFor(name);
  const pool = createPool(url, { max: options.poolMax ?? 10 });
  let dropped = false;
  return {
    pool,
    url,
    name,
    async drop() {
      if (dropped) return;
      dropped = true;
      await pool.end();
      await withAdmin((admin) => admin.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`));
    },
  };
}

/**
 * Registers a database for the calling test file: created before its tests, dropped after them unless one
 * failed (then kept, and its name printed). Read `pool`/`url`/`name` inside tests, not at import time.
 */
export function useTestDatabase(options: TestDatabaseOptions = {}): TestDatabase {
  let db: TestDatabase | undefined;
  let failed = false;
  beforeAll(async () => {
    db = await createTestDatabase(options);
  });
  afterEach((ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
  });
  afterAll(async () => {
    if (!db) return;
    if (failed) {
      await db.pool.end();
      console.error(`test database kept for inspection: ${db.url}`);
    } else {
      await db.drop();
    }
  });
  const current = () => {
    if (!db) throw new Error('useTestDatabase: the database exists only inside tests (after beforeAll)');
    return db;
  };
  return {
    get pool() {
      return current().pool;
    },
    get url() {
      return current().url;
    },
    get name() {
      return current().name;
    },
    drop: () => current().drop(),
  };
}
