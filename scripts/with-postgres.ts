// Runs a command with a reachable Postgres in DATABASE_URL: the given DATABASE_URL, else the machine's
// Postgres at the tests' default URL, else an embedded cluster started for the command's duration.
//   npx tsx scripts/with-postgres.ts npx vitest run
import { spawn } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { acceptsConnections } from '../db/connect.js';
import { startEmbeddedPostgres } from '../db/embedded.js';

const DEFAULT_TEST_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/test';

async function run(command: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const [file, ...args] = command;
  if (!file) throw new Error('usage: with-postgres.ts <command> [args…]');
  const child = spawn(file, args, { stdio: 'inherit', env });
  // Forward Ctrl-C / termination so the child can clean up before we stop Postgres.
  const forward = (signal: NodeJS.Signals) => child.kill(signal);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  try {
    return await new Promise<number>((resolveExit, reject) => {
      child.once('error', reject);
      child.once('exit', (code, signal) => resolveExit(code ?? (signal ? 128 : 1)));
    });
  } finally {
    process.off('SIGINT', forward);
    process.off('SIGTERM', forward);
  }
}

/** Where the tests' database is, for one line before they run: host:port/db, never the user or password. */
function describeDatabase(url: string, origin: string): string {
  try {
    const parsed = new URL(url);
    return `with-postgres: tests use Postgres at ${parsed.hostname}:${parsed.port || '5432'}${parsed.pathname} (${origin})\n`;
  } catch {
    return `with-postgres: tests use the Postgres in DATABASE_URL (${origin}; not a URL, so not shown)\n`;
  }
}

const command = process.argv.slice(2);
let exitCode: number;
if (process.env.DATABASE_URL) {
  process.stderr.write(describeDatabase(process.env.DATABASE_URL, 'from DATABASE_URL'));
  exitCode = await run(command, process.env);
} else if (await acceptsConnections(DEFAULT_TEST_DATABASE_URL, 2_000)) {
  process.stderr.write(describeDatabase(DEFAULT_TEST_DATABASE_URL, 'the default; DATABASE_URL is not set'));
  exitCode = await run(command, { ...process.env, DATABASE_URL: DEFAULT_TEST_DATABASE_URL });
} else {
  process.stderr.write(`with-postgres: nothing answers at 127.0.0.1:5432; starting the embedded Postgres (.data/pg)\n`);
  const embedded = await startEmbeddedPostgres({
    dataDir: resolve(dirname(fileURLToPath(import.meta.url)), '../.data/pg'),
    database: 'test',
  });
  process.stderr.write(describeDatabase(embedded.databaseUrl, 'embedded, data in .data/pg'));
  try {
    exitCode = await run(command, { ...process.env, DATABASE_URL: embedded.databaseUrl });
  } finally {
    await embedded.stop();
  }
}
// Explicit: an exitCode set here was observed to be reset to 0 under tsx.
process.exit(exitCode);
