// The production topology, run for real (issue 23): the Temporal server operators deploy (temporalio/server 1.31.2,
// built from source by scripts/ensure-temporal-server.sh and configured as the image is: deploy/temporal/server.env)
// with its state in Postgres, set up by the deploy scripts docker-compose.yml runs (setup-schema.sh through
// temporal-sql-tool, setup-namespace.sh through the `temporal` CLI), its frontend on mutual TLS with a CA this file
// makes. Two compiled worker processes with production settings, a stream consumer and a backfill handing over to
// the stream; mid-stream a kill -9 of a worker, a restart of the Temporal server (SIGTERM, start again) and a
// restart of the consumers' own Postgres: each time the database equals the reference fold and no ACK precedes
// its commit. The client refuses a wrong CA and a missing client certificate at once, naming the setting; a
// broken setup (wrong schema dir, a missing search attribute, a server certificate for another name) fails
// naming what to fix.
import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../db/connect.js';
import { loadCommitted } from '../../db/index.js';
import { Journal } from '../../simulator/journal.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import { SEARCH_ATTRIBUTES } from '../../workflows/definitions.js';
import { foldExecutions, savedEffects } from '../db/consume-stream-support.js';
import { runCli, type CliResult } from '../support/cli.js';
import { ADMIN_DATABASE_URL } from '../support/db.js';
import { stopChildProcess, useResources } from '../support/leaks.js';
import { startRestartablePostgres } from '../support/restartable-postgres.js';
import { waitFor } from '../support/temporal.js';
import {
  ensureTemporalServer,
  freeServerPorts,
  repoRoot,
  serverEnvironment,
  startServer,
  systemInfo,
  tlsHandshake,
  type ClientTls,
  type RunningServer,
  type ServerPorts,
  type ServerTls,
  type TemporalServerBuild,
} from '../support/temporal-server.js';
import { createCa, issueCertificate } from '../support/tls-proxy.js';
import { logLinesWith, nonJsonLines, spawnWorker, type WorkerProcess } from '../support/worker-process.js';

const run = promisify(execFile);
const API_KEY = `wh-topology-secret-${randomUUID()}`;
/** Failing fast means well inside the CLI's own connect deadline, let alone setup-namespace.sh's retries. */
const FAST_MS = 15_000;
const SERVER_NAME = 'localhost';

let dir: string;
let build: TemporalServerBuild;
let temporalCli: string;
let ports: ServerPorts;
let serverTls: ServerTls;
let clientTls: ClientTls;
let otherCaCert: string;
let elsewhere: { cert: string; key: string };
let server: RunningServer | undefined;
const databases = {
  temporal: `topology_${randomBytes(4).toString('hex')}`,
  visibility: '',
};
databases.visibility = `${databases.temporal}_visibility`;
const admin = new URL(ADMIN_DATABASE_URL);
const postgresTarget = {
  host: admin.hostname,
  port: Number(admin.port || 5432),
  user: decodeURIComponent(admin.username) || 'postgres',
  password: decodeURIComponent(admin.password) || 'unused',
};
const setupLog: string[] = [];

const address = () => `127.0.0.1:${ports.FRONTEND_GRPC_PORT}`;

/** The client settings as the worker, the operator CLI and the `temporal` CLI read them (nothing else). */
function clientEnv(overrides: Record<string, string> = {}): Record<string, string> {
  return {
    TEMPORAL_ADDRESS: address(),
    TEMPORAL_NAMESPACE: 'default',
    TEMPORAL_TLS_SERVER_CA_CERT_PATH: clientTls.caCert,
    TEMPORAL_TLS_CLIENT_CERT_PATH: clientTls.clientCert,
    TEMPORAL_TLS_CLIENT_KEY_PATH: clientTls.clientKey,
    XDG_CONFIG_HOME: join(dir, 'config-home'),
    ...overrides,
  };
}

/** This process's environment without any TEMPORAL_* setting of the machine's. */
function machineEnv(): Record<string, string> {
  return Object.fromEntries(
    Object.entries(process.env).filter(
      (entry): entry is [string, string] => !entry[0].startsWith('TEMPORAL_') && entry[1] !== undefined,
    ),
  );
}

function cli(env: Record<string, string>, ...args: string[]): Promise<CliResult> {
  const unset = Object.fromEntries(
    Object.keys(process.env)
      .filter((name) => name.startsWith('TEMPORAL_') && !(name in env))
      .map((name) => [name, '']),
  );
  return runCli({ ...unset, ...env }, ...args);
}

/** Runs a deploy script with `sh` as the admin-tools image does; never rejects. */
async function deployScript(script: string, env: Record<string, string>): Promise<CliResult> {
  try {
    const { stdout, stderr } = await run('sh', [join(repoRoot, 'deploy/temporal', script)], {
      env: { ...machineEnv(), ...env },
      timeout: 180_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    return {
      code: typeof failed.code === 'number' ? failed.code : -1,
      stdout: failed.stdout ?? '',
      stderr: failed.stderr ?? '',
    };
  }
}

function schemaEnv(overrides: Record<string, string> = {}): Record<string, string> {
  return {
    POSTGRES_SEEDS: postgresTarget.host,
    DB_PORT: String(postgresTarget.port),
    POSTGRES_USER: postgresTarget.user,
    SQL_PASSWORD: postgresTarget.password,
    DBNAME: databases.temporal,
    VISIBILITY_DBNAME: databases.visibility,
    TEMPORAL_SQL_TOOL: build.sqlTool,
    TEMPORAL_SCHEMA_DIR: build.schemaDir,
    ...overrides,
  };
}

function namespaceEnv(namespace: string, attributes: Record<string, string>): Record<string, string> {
  return {
    ...clientEnv({ TEMPORAL_NAMESPACE: namespace }),
    TEMPORAL_CLI: temporalCli,
    WHALEHUNT_SEARCH_ATTRIBUTES: Object.entries(attributes)
      .map(([name, type]) => `${name}=${type}`)
      .join(' '),
    SETUP_RETRY_SECONDS: '1',
    SETUP_ATTEMPTS: '20',
  };
}

async function withAdmin<T>(database: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const url = new URL(ADMIN_DATABASE_URL);
  url.pathname = `/${database}`;
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** The schema version temporal-sql-tool recorded in a database, and the newest the release ships. */
async function schemaVersions(database: string, schema: 'temporal' | 'visibility') {
  const recorded = await withAdmin(database, (client) =>
    client.query<{ curr_version: string }>('SELECT curr_version FROM schema_version'),
  );
  const shipped = readdirSync(join(build.schemaDir, schema, 'versioned'))
    .map((name) => name.replace(/^v/, ''))
    .sort((a, b) => a.localeCompare(b, undefined, { numeric: true }))
    .at(-1);
  return { recorded: recorded.rows[0]?.curr_version, shipped };
}

/** Starts the server with `tls` and waits until its frontend answers over mutual TLS; fails at once if it exits. */
async function startTemporal(tls: ServerTls, client: ClientTls = clientTls) {
  const started = startServer(build.server, serverEnvironment({ postgres: postgresTarget, databases, ports, tls }));
  server = started;
  const lastLines = () =>
    started.lines
      .slice(-12)
      .map((line) => line.slice(0, 600))
      .join('\n');
  const info = await Promise.race([
    waitFor(() => systemInfo(address(), client), {
      description: 'the Temporal frontend to answer over mutual TLS',
      timeoutMs: 120_000,
      intervalMs: 500,
    }),
    started.exited.then(({ code, signal }) => {
      throw new Error(`the Temporal server exited (${signal ?? code}) while starting`);
    }),
  ]).catch((error: Error) => {
    throw new Error(`${error.message}\nserver output:\n${lastLines()}`);
  });
  return { started, info };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'whalehunt-topology-'));
  build = ensureTemporalServer();
  temporalCli = (await run('bash', [join(repoRoot, 'scripts/ensure-temporal-cli.sh')])).stdout.trim();
  ports = await freeServerPorts();

  const caCert = createCa(dir, 'ca');
  otherCaCert = createCa(dir, 'other-ca');
  const names = `subjectAltName=IP:127.0.0.1,DNS:${SERVER_NAME}\nbasicConstraints=CA:FALSE`;
  const frontend = issueCertificate(dir, 'frontend', 'ca', `${names}\nextendedKeyUsage=serverAuth`);
  // The server's services and its system worker use one certificate both ways.
  const internode = issueCertificate(dir, 'internode', 'ca', `${names}\nextendedKeyUsage=serverAuth,clientAuth`);
  const client = issueCertificate(dir, 'client', 'ca', 'extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE');
  elsewhere = issueCertificate(
    dir,
    'elsewhere',
    'ca',
    'subjectAltName=DNS:elsewhere.example\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth',
  );
  serverTls = {
    caCert,
    frontendCert: frontend.cert,
    frontendKey: frontend.key,
    internodeCert: internode.cert,
    internodeKey: internode.key,
    frontendServerName: SERVER_NAME,
    internodeServerName: SERVER_NAME,
  };
  clientTls = { caCert, clientCert: client.cert, clientKey: client.key };

  const schema = await deployScript('setup-schema.sh', schemaEnv());
  setupLog.push(schema.stdout, schema.stderr);
  expect(schema.code, `setup-schema.sh failed:\n${schema.stdout}\n${schema.stderr}`).toBe(0);

  await startTemporal(serverTls);
  const namespace = await deployScript('setup-namespace.sh', namespaceEnv('default', SEARCH_ATTRIBUTES));
  setupLog.push(namespace.stdout, namespace.stderr);
  expect(
    namespace.code,
    `setup-namespace.sh failed:\n${namespace.stdout}\n${namespace.stderr}\nserver (exit ${server?.child.exitCode}):\n` +
      server?.lines
        .slice(-8)
        .map((line) => line.slice(0, 600))
        .join('\n'),
  ).toBe(0);
}, 900_000);

afterAll(async () => {
  await server?.stop();
  await withAdmin('postgres', async (client) => {
    for (const name of [databases.temporal, databases.visibility]) {
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    }
  });
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('the production topology: Temporal server 1.31.2 on Postgres over mutual TLS', () => {
  const res = useResources();

  it('is set up by the deploy scripts: schema version, server version and the TLS handshake', async () => {
    for (const [database, schema] of [
      [databases.temporal, 'temporal'],
      [databases.visibility, 'visibility'],
    ] as const) {
      const { recorded, shipped } = await schemaVersions(database, schema);
      console.info(`schema ${schema}: database ${database} at version ${recorded} (the release ships ${shipped})`);
      expect(recorded).toBe(shipped);
    }
    const info = await systemInfo(address(), clientTls);
    const buildInfo = server!.lines.find((line) => line.includes('"server-version"'));
    console.info(`Temporal server ${info.serverVersion} at ${address()}; its log: ${buildInfo}`);
    expect(info.serverVersion).toBe('1.31.2');
    expect(buildInfo).toContain('"server-version":"1.31.2"');

    const handshake = await tlsHandshake(address(), clientTls);
    console.info(
      `TLS handshake with ${address()}: ${handshake.protocol} ${handshake.cipher}, ALPN ${handshake.alpn}, ` +
        `server certificate ${handshake.serverSubject} (${handshake.serverAltNames}) issued by ${handshake.serverIssuer}`,
    );
    expect(handshake).toMatchObject({ alpn: 'h2', serverSubject: 'frontend', serverIssuer: 'ca' });

    const output = setupLog.join('\n');
    for (const name of Object.keys(SEARCH_ATTRIBUTES)) expect(output).toMatch(new RegExp(`search attribute ${name} `));
    expect(output).toContain('Temporal schemas are up to date');
  });

  it('refuses a wrong CA and a missing client certificate at once, naming the setting', async () => {
    const wrongCa = await timed(() => cli(clientEnv({ TEMPORAL_TLS_SERVER_CA_CERT_PATH: otherCaCert }), 'list'));
    expect(wrongCa.ms).toBeLessThan(FAST_MS);
    expect(wrongCa.result.code).toBe(1);
    expect(wrongCa.result.stderr).toContain(
      "the server's certificate is not signed by the CA in TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    );

    const noClientCert = await timed(() =>
      cli(clientEnv({ TEMPORAL_TLS_CLIENT_CERT_PATH: '', TEMPORAL_TLS_CLIENT_KEY_PATH: '' }), 'list'),
    );
    expect(noClientCert.ms).toBeLessThan(FAST_MS);
    expect(noClientCert.result.code).toBe(1);
    expect(noClientCert.result.stderr).toContain('set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH');
    expect(`${wrongCa.result.stderr}${noClientCert.result.stderr}`).not.toMatch(/^\s+at /m);
  });

  it('two workers, a consumer and a backfill handing over survive a kill -9, a server restart and a Postgres restart', async () => {
    const postgres = res.track(await startRestartablePostgres(), (p) => p.close(), 'restartable postgres');
    const pool = res.track(createPool(postgres.url, { max: 2 }), (p) => p.end(), 'test pool');
    const journal = Journal.generate({ seed: 2323, transitions: 60 });
    const stream = res.track(
      await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY], checkpointEvery: 5 }),
      (s) => s.close(),
      'reference stream',
    );
    // Production settings: only where things are (no test tuning); the compiled build with its workflow bundle.
    const env = {
      ...clientEnv(),
      DATABASE_URL: postgres.url,
      WHALEHUNT_URL: stream.url,
      WHALEHUNT_API_KEY: API_KEY,
      PAGE_STREAM: stream.stream,
    };
    const workers: WorkerProcess[] = [];
    const startWorker = async (label: string) => {
      const worker = spawnWorker(env, machineEnv());
      res.track(worker.child, (child) => stopChildProcess(child, 20_000), `worker process (${label})`);
      await waitFor(() => Promise.resolve(logLinesWith(worker, 'worker running').length > 0), {
        description: `worker ${label} running (output so far:\n${[...worker.lines, ...worker.stderr].join('\n')})`,
        timeoutMs: 90_000,
      });
      workers.push(worker);
      return worker;
    };
    await startWorker('1');
    await startWorker('2');

    const consumers = ['topology-stream', 'topology-backfill'];
    const ackChecks = watchAcksAgainstCommits(stream, pool, consumers);
    const started = await cli(env, 'start', '--consumer', consumers[0]!, '--start', 'from_floor');
    expect(started, started.stderr).toMatchObject({ code: 0 });
    const backfill = await cli(
      env,
      'backfill',
      '--consumer',
      consumers[1]!,
      '--filter',
      '{}',
      '--then-stream',
      '--detach',
    );
    expect(backfill, backfill.stderr).toMatchObject({ code: 0 });

    const committed = async (consumerId: string) => (await loadCommitted(pool, consumerId))?.version ?? 0;
    /** Both consumers at the journal's head, each with the reference fold and one receipt per event. */
    const atTheFold = async (after: string) => {
      const head = journal.head;
      for (const consumerId of consumers) {
        await waitFor(async () => (await loadCommitted(pool, consumerId))?.position === head, {
          description: `${consumerId} to commit the head ${head} after ${after}`,
          timeoutMs: 120_000,
          intervalMs: 250,
        });
        const saved = await savedEffects(pool, consumerId);
        expect(saved.executions, `${consumerId} after ${after}`).toEqual(foldExecutions(journal));
        expect(saved.receiptIds).toHaveLength(new Set(saved.receiptIds).size);
      }
      console.info(`after ${after}: both consumers at the head ${head}, equal to the reference fold`);
    };
    await atTheFold('the start (the backfill handed over)');

    const faults: [string, () => Promise<void>][] = [
      [
        'kill -9 of a worker',
        async () => {
          const doomed = workers.shift()!;
          doomed.child.kill('SIGKILL');
          expect(await doomed.exited).toEqual({ code: null, signal: 'SIGKILL' });
          await res.close(doomed.child);
        },
      ],
      [
        'a restart of the Temporal server',
        async () => {
          const stopping = server!;
          await stopping.stop();
          expect(await stopping.exited, stopping.lines.slice(-20).join('\n')).toEqual({ code: 0, signal: null });
          const { info } = await startTemporal(serverTls);
          console.info(`Temporal server ${info.serverVersion} started again on the same databases`);
        },
      ],
      [
        "a restart of the consumers' Postgres",
        async () => {
          await postgres.stop();
          await postgres.start();
        },
      ],
    ];
    for (const [fault, inject] of faults) {
      journal.startLiveAppends(5);
      // Mid-stream: both consumers have committed since the last check.
      for (const consumerId of consumers) {
        const before = await committed(consumerId);
        await waitFor(async () => (await committed(consumerId)) > before, {
          description: `${consumerId} to commit past version ${before} before ${fault}`,
          timeoutMs: 60_000,
        });
      }
      await inject();
      journal.stopLiveAppends();
      await atTheFold(fault);
      if (workers.length < 2) await startWorker('replacement');
    }

    const checked = await Promise.all(ackChecks);
    expect(checked.length).toBeGreaterThan(0);
    expect(checked.filter((check) => check.acked > check.committed)).toEqual([]);
    for (const worker of workers) {
      expect(worker.child.exitCode, worker.stderr.join('\n')).toBeNull();
      expect(nonJsonLines(worker)).toEqual([]);
      expect([...worker.lines, ...worker.stderr].filter((line) => line.includes(API_KEY))).toEqual([]);
    }
    for (const worker of workers) {
      worker.child.kill('SIGTERM');
      expect(await worker.exited).toEqual({ code: 0, signal: null });
      await res.close(worker.child);
    }
    await res.close(stream);
    await res.close(pool);
    await res.close(postgres);
  }, 600_000);

  it('a broken setup fails naming what to fix: the schema dir, a search attribute, the server name', async () => {
    const noSchema = await deployScript('setup-schema.sh', schemaEnv({ TEMPORAL_SCHEMA_DIR: join(dir, 'nowhere') }));
    expect(noSchema.code).not.toBe(0);
    expect(noSchema.stderr).toContain(`no Temporal schema at ${join(dir, 'nowhere')}/temporal/versioned`);
    expect(noSchema.stderr).toContain('set TEMPORAL_SCHEMA_DIR');

    // A namespace set up without one of the attributes: starting a consumer there names the missing one.
    const [missing, ...registered] = Object.keys(SEARCH_ATTRIBUTES);
    const incomplete = await deployScript(
      'setup-namespace.sh',
      namespaceEnv(
        'incomplete',
        Object.fromEntries(registered.map((name) => [name, SEARCH_ATTRIBUTES[name as keyof typeof SEARCH_ATTRIBUTES]])),
      ),
    );
    expect(incomplete.code, incomplete.stderr).toBe(0);
    const refused = await cli(
      clientEnv({ TEMPORAL_NAMESPACE: 'incomplete' }),
      'start',
      '--consumer',
      'nowhere',
      '--start',
      'live_cut',
    );
    console.info(`start in a namespace without ${missing}: ${refused.stderr}`);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(missing);

    // The frontend presents a certificate for another name: the client names the setting that fixes it.
    await server!.stop();
    await startTemporal(
      {
        ...serverTls,
        frontendCert: elsewhere.cert,
        frontendKey: elsewhere.key,
        frontendServerName: 'elsewhere.example',
      },
      { ...clientTls, serverName: 'elsewhere.example' },
    );
    const wrongName = await timed(() => cli(clientEnv(), 'list'));
    expect(wrongName.ms).toBeLessThan(FAST_MS);
    expect(wrongName.result.code).toBe(1);
    expect(wrongName.result.stderr).toContain("the server's certificate does not name this host");
    expect(wrongName.result.stderr).toContain('TEMPORAL_TLS_SERVER_NAME');
    const named = await cli(clientEnv({ TEMPORAL_TLS_SERVER_NAME: 'elsewhere.example' }), 'list');
    expect(named, named.stderr).toMatchObject({ code: 0 });
  });
});

async function timed<T>(fn: () => Promise<T>): Promise<{ result: T; ms: number }> {
  const startedAt = performance.now();
  const result = await fn();
  return { result, ms: performance.now() - startedAt };
}

/**
 * At each ACK the stream server accepts, the position the consumer's database had committed by then (read as soon
 * as the database answers: an ACK during its restart is checked once it is back).
 */
function watchAcksAgainstCommits(
  stream: ReferenceStreamServer,
  pool: pg.Pool,
  consumerIds: string[],
): Promise<{ consumerId: string; acked: number; committed: number }>[] {
  const seen: Promise<{ consumerId: string; acked: number; committed: number }>[] = [];
  stream.events.on('ack', (ack: { consumerId: string; position: number }) => {
    if (!consumerIds.includes(ack.consumerId)) return;
    seen.push(
      waitFor(async () => (await loadCommitted(pool, ack.consumerId))?.position ?? 0, {
        description: `the committed position of ${ack.consumerId} at its ACK of ${ack.position}`,
        timeoutMs: 60_000,
        intervalMs: 200,
      }).then((committed) => ({ consumerId: ack.consumerId, acked: ack.position, committed })),
    );
  });
  return seen;
}
