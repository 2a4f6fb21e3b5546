// `npm run db:check`: fails when db/schema.ts and the committed migrations have drifted apart. It runs
// drizzle-kit generate against a temporary copy of db/migrations; if generate would write a migration, the
// schema has changes no migration carries yet. The real migrations folder is never touched.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const migrations = join(root, 'db', 'migrations');
const sqlFiles = (dir: string) =>
  readdirSync(dir)
    .filter((f) => f.endsWith('.sql'))
    .sort();

function check(): number {
  const scratch = mkdtempSync(join(tmpdir(), 'whalehunt-migrations-'));
  try {
    const out = join(scratch, 'migrations');
    cpSync(migrations, out, { recursive: true });
    const config = join(scratch, 'drizzle.config.json');
    // drizzle-kit prefixes `out` with "./": give it paths relative to the working directory.
    writeFileSync(
      config,
      JSON.stringify({ dialect: 'postgresql', schema: './db/schema.ts', out: relative(root, out) }),
    );
    const run = spawnSync(
      join(root, 'node_modules', '.bin', 'drizzle-kit'),
      ['generate', '--config', config, '--name', 'drift_check'],
      {
        cwd: root,
        encoding: 'utf8',
      },
    );
    const output = `${run.stdout}${run.stderr}`;
    const added = sqlFiles(out).filter((f) => !sqlFiles(migrations).includes(f));
    if (added.length > 0) {
      console.error(
        `db/schema.ts has changes that no migration in db/migrations carries (drizzle-kit would generate ${added.join(', ')}).\n` +
          'Run `npm run db:generate -- --name <what_changed>` and commit the new migration. Never edit an applied migration.',
      );
      return 1;
    }
    // drizzle-kit exits 0 on some failures (e.g. an unreadable snapshot): trust only its explicit verdict.
    if (run.status !== 0 || !/No schema changes/i.test(output)) {
      console.error(`db:check could not confirm the migrations (drizzle-kit exit ${run.status}):\n${output}`);
      return 2;
    }
    console.log(`db:check: db/schema.ts and ${sqlFiles(migrations).length} migration(s) agree`);
    return 0;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

process.exitCode = check();
