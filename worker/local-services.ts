// The services the consumer needs, for a machine that has none running: Postgres from DATABASE_URL or an
// embedded cluster, Temporal from TEMPORAL_ADDRESS or a `temporal server start-dev` child process with a
// persistent SQLite store, the Web UI and the project's search attributes. `npm start` calls this.
import { execFile, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { Connection } from '@temporalio/client';
import { DEFAULT_EMBEDDED_PG_PORT, startEmbeddedPostgres } from '../db/embedded.js';
import { SEARCH_ATTRIBUTES } from '../workflows/definitions.js';
import { PACKAGE_ROOT } from './build-info.js';

export interface LocalServicesOptions {
  /** Holds the embedded Postgres cluster (`pg/`) and the dev server's store (`temporal.db`). */
  dataDir: string;
  /** Use this Postgres instead of an embedded one. Default: env DATABASE_URL. */
  databaseUrl?: string;
  /** Use this Temporal frontend (host:port) instead of a dev server. Default: env TEMPORAL_ADDRESS. */
  temporalAddress?: string;
  /** Default: env TEMPORAL_NAMESPACE, else "default". */
  temporalNamespace?: string;
  /** Dev server gRPC port. Default: env TEMPORAL_PORT, else 7233. */
  temporalPort?: number;
  /** Dev server Web UI port. Default: env TEMPORAL_UI_PORT, else 8233. */
  temporalUiPort?: number;
  /** Embedded Postgres port. Default: env EMBEDDED_PG_PORT, else 54329. */
  postgresPort?: number;
  /** How long to wait for the dev server to accept connections. */
  startupTimeoutMs?: number;
  /** Progress and child-process output; default stderr. */
  log?: (line: string) => void;
  env?: NodeJS.ProcessEnv;
}

export interface LocalServices {
  databaseUrl: string;
  temporal: {
    address: string;
    namespace: string;
    /** The dev server's Web UI, or null when Temporal is external. */
    uiUrl: string | null;
  };
  /** Stops what this call started (never external services); safe to call more than once. */
  stop(): Promise<void>;
}

export class LocalServicesError extends Error {
  constructor(
    readonly code: 'temporal_cli_unavailable' | 'temporal_dev_server_failed' | 'invalid_local_services_config',
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'LocalServicesError';
  }
}

export async function startLocalServices(options: LocalServicesOptions): Promise<LocalServices> {
  const env = options.env ?? process.env;
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const dataDir = resolve(options.dataDir);
  await mkdir(dataDir, { recursive: true });
  const stops: (() => Promise<void>)[] = [];
  const stopAll = once(async () => {
    // Reverse start order; try every stop even if one fails.
    const failures: unknown[] = [];
    for (const stop of stops.reverse()) await stop().catch((error: unknown) => failures.push(error));
    if (failures.length) throw new AggregateError(failures, 'stopping local services failed');
  });

  try {
    let databaseUrl = options.databaseUrl ?? nonEmpty(env.DATABASE_URL);
    if (databaseUrl) {
      log('postgres: using DATABASE_URL');
    } else {
      const port = options.postgresPort ?? portFromEnv(env, 'EMBEDDED_PG_PORT', DEFAULT_EMBEDDED_PG_PORT);
      const pgDir = join(dataDir, 'pg');
      log(`postgres: starting embedded Postgres on 127.0.0.1:${port} (data ${pgDir})`);
      const embedded = await startEmbeddedPostgres({ dataDir: pgDir, port });
      stops.push(() => embedded.stop());
      databaseUrl = embedded.databaseUrl;
    }

    const namespace = options.temporalNamespace ?? nonEmpty(env.TEMPORAL_NAMESPACE) ?? 'default';
    const externalAddress = options.temporalAddress ?? nonEmpty(env.TEMPORAL_ADDRESS);
    let temporal: LocalServices['temporal'];
    if (externalAddress) {
      log(`temporal: using TEMPORAL_ADDRESS ${externalAddress} (namespace ${namespace})`);
      temporal = { address: externalAddress, namespace, uiUrl: null };
    } else {
      const devServer = await startTemporalDevServer({
        dbFilename: join(dataDir, 'temporal.db'),
        namespace,
        port: options.temporalPort ?? portFromEnv(env, 'TEMPORAL_PORT', 7233),
        uiPort: options.temporalUiPort ?? portFromEnv(env, 'TEMPORAL_UI_PORT', 8233),
        startupTimeoutMs: options.startupTimeoutMs ?? 60_000,
        env,
        log,
      });
      stops.push(devServer.stop);
      temporal = { address: devServer.address, namespace, uiUrl: devServer.uiUrl };
      log(`temporal: dev server ready at ${devServer.address}; Web UI ${devServer.uiUrl}`);
    }
    return { databaseUrl, temporal, stop: stopAll };
  } catch (error) {
    await stopAll().catch((stopError: unknown) => log(`stopping after a failed start: ${String(stopError)}`));
    throw error;
  }
}

interface DevServerOptions {
  dbFilename: string;
  namespace: string;
  port: number;
  uiPort: number;
  startupTimeoutMs: number;
  env: NodeJS.ProcessEnv;
  log: (line: string) => void;
}

/**
 * A line of the dev server's output as the job prints it. Its banner names its own Prometheus endpoint
 * ("Metrics: …": the Temporal server's internals), which would read as a second URL for the consumer's metrics.
 */
export function devServerLine(line: string): string {
  const metrics = /^Metrics:\s+(\S+)/.exec(line.trim());
  if (metrics) return `[temporal] the dev server's own metrics (Temporal server internals): ${metrics[1]}`;
  return `[temporal] ${line}`;
}

async function startTemporalDevServer(
  options: DevServerOptions,
): Promise<{ address: string; uiUrl: string; stop: () => Promise<void> }> {
  const cli = await ensureTemporalCli(options.env);
  const address = `127.0.0.1:${options.port}`;
  const args = [
    'server',
    'start-dev',
    '--ip',
    '127.0.0.1',
    '--port',
    String(options.port),
    '--ui-port',
    String(options.uiPort),
    '--db-filename',
    options.dbFilename,
    '--log-level',
    'warn',
    ...Object.entries(SEARCH_ATTRIBUTES).flatMap(([name, type]) => ['--search-attribute', `${name}=${type}`]),
    // "default" always exists; any other namespace is created at launch.
    ...(options.namespace === 'default' ? [] : ['--namespace', options.namespace]),
  ];
  options.log(`temporal: starting dev server on ${address} (store ${options.dbFilename})`);
  const startedAt = performance.now();
  // Own process group (detached): a terminal's Ctrl-C reaches the job's process group only, so the dev
  // server keeps serving while the worker drains and this job stops it last. Being out of the group also
  // means nothing kills it for us, so the watchdog wrapper stops it when this process dies (even by SIGKILL)
  // and an exit hook stops it on every exit path where this process still runs code.
  const child = spawn('bash', ['-c', WATCHDOG_SCRIPT, 'temporal-watchdog', String(process.pid), cli, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: options.env,
    detached: true,
  });
  const killOnExit = (): void => signalGroup(child, 'SIGTERM');
  process.once('exit', killOnExit);
  child.once('exit', () => process.off('exit', killOnExit));
  const recentOutput: string[] = [];
  // Shutdown makes the server's internal workers warn about the closing frontend: noise, not news.
  let stopping = false;
  for (const stream of [child.stdout, child.stderr]) {
    createInterface({ input: stream }).on('line', (line) => {
      recentOutput.push(line);
      if (recentOutput.length > 20) recentOutput.shift();
      if (!stopping) options.log(devServerLine(line));
    });
  }
  const exited = new Promise<string>((resolveExit) => {
    child.once('exit', (code, signal) => resolveExit(signal ? `signal ${signal}` : `code ${code ?? '?'}`));
    child.once('error', (error) => resolveExit(error.message));
  });
  const stop = once(() => {
    stopping = true;
    return stopChild(child);
  });
  // After a successful start the consumer's workers notice a dead server too; say why here.
  void exited.then((how) => {
    if (!stopping) options.log(`temporal: dev server exited unexpectedly (${how})`);
  });

  try {
    await Promise.race([
      waitUntilServing(address, options.namespace, options.startupTimeoutMs),
      exited.then((how) => {
        throw new LocalServicesError(
          'temporal_dev_server_failed',
          `temporal server start-dev exited (${how}) before serving on ${address}` +
            ` (port ${options.port} or ${options.uiPort} taken? set TEMPORAL_PORT/TEMPORAL_UI_PORT, or TEMPORAL_ADDRESS` +
            ` to use a running server). Last output:\n${recentOutput.join('\n')}`,
        );
      }),
    ]);
  } catch (error) {
    await stop();
    throw error;
  }
  options.log(`temporal: dev server accepted connections after ${Math.round(performance.now() - startedAt)} ms`);
  return { address, uiUrl: `http://127.0.0.1:${options.uiPort}`, stop };
}

async function ensureTemporalCli(env: NodeJS.ProcessEnv): Promise<string> {
  try {
    const { stdout } = await promisify(execFile)('bash', [join(PACKAGE_ROOT, 'scripts/ensure-temporal-cli.sh')], {
      env,
    });
    const path = stdout.trim();
    if (path) return path;
    throw new Error('scripts/ensure-temporal-cli.sh printed no path');
  } catch (cause) {
    const detail = (cause as { stderr?: string }).stderr?.trim() || String(cause);
    throw new LocalServicesError('temporal_cli_unavailable', `no Temporal CLI for the dev server:\n${detail}`, {
      cause,
    });
  }
}

/** Polls until the frontend answers for the namespace; the deadline bounds a server that never comes up. */
async function waitUntilServing(address: string, namespace: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const connection = await Connection.connect({ address, connectTimeout: 1_000 });
      try {
        await connection.workflowService.describeNamespace({ namespace });
        return;
      } finally {
        await connection.close();
      }
    } catch (error) {
      lastError = error;
      await new Promise((resolveDelay) => setTimeout(resolveDelay, 200));
    }
  }
  throw new LocalServicesError(
    'temporal_dev_server_failed',
    `the Temporal dev server did not serve namespace ${namespace} at ${address} within ${timeoutMs} ms: ${String(lastError)}`,
  );
}

/**
 * Runs the dev server ($2…) and stops it with SIGTERM when the parent ($1) is gone, checked every second, or
 * when the wrapper itself is asked to stop. Exits with the server's status.
 */
const WATCHDOG_SCRIPT = `
parent=$1; shift
"$@" & server=$!
trap 'kill -TERM $server 2>/dev/null' TERM INT HUP
while kill -0 "$parent" 2>/dev/null && kill -0 $server 2>/dev/null; do sleep 1 & wait $!; done
kill -TERM $server 2>/dev/null
wait $server
`;

/** The dev server's whole process group (the watchdog and the server); a group already gone is fine. */
function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // ESRCH: the group exited between the check and the signal.
  }
}

/** SIGTERM lets the dev server flush its SQLite store; SIGKILL only if it hangs. */
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolveExit) => child.once('exit', () => resolveExit()));
  signalGroup(child, 'SIGTERM');
  const escalation = setTimeout(() => signalGroup(child, 'SIGKILL'), 15_000);
  try {
    await exited;
  } finally {
    clearTimeout(escalation);
  }
}

function portFromEnv(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return fallback;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) {
    throw new LocalServicesError(
      'invalid_local_services_config',
      `${name} must be a port number (1-65535), got ${JSON.stringify(raw)}`,
    );
  }
  return port;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value;
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => (running ??= fn());
}
