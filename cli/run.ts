// THE MAIN JOB (`npm start`): the development stack (worker/dev-stack.ts: local services, migrations, the
// reference stream with live appends), an in-process worker with the outbox dispatcher, and one consumer,
// started if it is not running (its first start is an explicit from_floor). Progress every interval until
// Ctrl-C; then everything stops in order and the next run resumes where this one stopped.
import { createWriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type pg from 'pg';
import { consumerSummary, type ConsumerSummary } from '../db/index.js';
import { CLI_COMMAND } from '../worker/build-info.js';
import { ConfigError, loadConfig, type WorkerConfig } from '../worker/config.js';
import { startDevStack, stopInReverse, type DevStack, type NamedStop } from '../worker/dev-stack.js';
import { JsonLogger } from '../worker/logger.js';
import { installRuntimeWithTelemetry, startWorkerRuntime, type WorkerRuntime } from '../worker/main.js';
import { onShutdownSignal } from '../worker/shutdown-signal.js';
import { loadTemporalSettings, TemporalSettingsError } from '../worker/temporal-connection.js';
import { formatCount, formatProgress } from '../protocol/progress.js';
import { consumerWorkflowId, statusQuery, type ConsumerStatus } from '../workflows/definitions.js';
import type { CliCommand } from './args.js';
import { startConsumer, type CommandIo } from './commands.js';
import {
  connectTemporal,
  consumerProgress,
  findConsumer,
  streamHeartbeat,
  withAnswerTimeout,
  type TemporalSession,
} from './consumers.js';
import { CliError } from './errors.js';
import { groupDecimal } from './format.js';

type RunCommand = Extract<CliCommand, { command: 'run' }>;

export interface RunIo extends CommandIo {
  err(text: string): void;
}

export async function runMainJob(cmd: RunCommand, env: NodeJS.ProcessEnv, io: RunIo): Promise<number> {
  const dataDir = resolve(cmd.dataDir);
  await mkdir(join(dataDir, 'logs'), { recursive: true });
  const logPath = join(dataDir, 'logs', 'whalehunt.log');
  const logFile = createWriteStream(logPath, { flags: 'a' });

  /** Undone in reverse order; entries without a name are steps of the shutdown rather than services. */
  const stops: NamedStop[] = [];
  const lastSeen: LastSeen = { summary: null };
  const shutdown = new AbortController();
  const shutdownRequested = new Promise<void>((resolveShutdown) =>
    shutdown.signal.addEventListener('abort', () => resolveShutdown(), { once: true }),
  );
  const offShutdownSignal = onShutdownSignal({
    graceful: (signal) => {
      io.err(`\n${signal}: shutting down (a commit in progress finishes; Ctrl-C again to exit at once)`);
      shutdown.abort();
    },
    forced: (signal) => {
      io.err(`${signal} again: exiting without waiting (the next run resumes from the last committed checkpoint)`);
      process.exit(130);
    },
  });

  try {
    io.out(`whalehunt-consumer: data in ${dataDir}, logs in ${logPath}`);
    // A Temporal named by the variables or a profile is used as it is; otherwise this job starts a dev server.
    const temporal = loadTemporalSettings(env);
    const stack = await startDevStack({
      dataDir,
      env,
      temporal,
      appendEveryMs: cmd.appendEveryMs,
      io,
      signal: shutdown.signal,
    });
    if (!stack) return 130;
    stops.push({ name: null, stop: () => stack.stop() });
    // Said after the worker drained, while the database is (usually) still up: where the next run resumes.
    stops.push({ name: null, stop: () => reportResumePoint(stack.pool, cmd.consumerId, lastSeen, io) });

    const config = workerConfig(env, stack, temporal.addressConfigured);
    const log = new JsonLogger({
      level: config.logLevel,
      secrets: [config.stream.apiKey, ...config.temporal.secrets()],
      bindings: { service: 'whalehunt-run', pid: process.pid },
      write: (line) => void logFile.write(line),
    });
    const telemetry = await installRuntimeWithTelemetry(config, log, stack.pool);
    if (telemetry) {
      stops.push({ name: 'metrics endpoint', stop: () => telemetry.close() });
      io.out(
        `worker metrics (the consumer's and the Temporal SDK's): ${telemetry.url}/metrics ` +
          `(health: ${telemetry.url}/healthz, ${telemetry.url}/readyz)`,
      );
    }
    log.info('main job starting', {
      consumerId: cmd.consumerId,
      dataDir,
      referenceStream: stack.stream.server !== null,
    });
    if (shutdown.signal.aborted) return 130;

    io.out('starting the worker (bundling workflow code takes a few seconds)...');
    const runtime: WorkerRuntime = await startWorkerRuntime({ config, log, pool: stack.pool, telemetry });
    stops.push({ name: 'worker', stop: () => runtime.shutdown() });
    // A fatal worker error ends the job like Ctrl-C does, with the reason printed.
    runtime.done.catch((error: unknown) => {
      io.err(`worker stopped: ${error instanceof Error ? error.message : String(error)} (details in ${logPath})`);
      shutdown.abort();
    });

    const session = await connectTemporal({
      temporal: config.temporal,
      taskQueue: config.taskQueue,
      databaseUrl: stack.services.databaseUrl,
    });
    stops.push({ name: 'Temporal client', stop: () => session.close() });
    await ensureConsumer(session, cmd, config, io);
    printWhereToLook(io, stack, cmd, env);

    await showProgress({
      session,
      pool: stack.pool,
      cmd,
      io,
      until: shutdownRequested,
      lastSeen,
    });
    return 0;
  } catch (error) {
    if (error instanceof ConfigError || error instanceof TemporalSettingsError) {
      throw new CliError('config_invalid', error.message);
    }
    throw error;
  } finally {
    // Reverse start order: the worker drains while Temporal, the stream and the database are still up.
    await stopInReverse(stops, (text) => io.err(text));
    offShutdownSignal();
    await new Promise<void>((resolveEnd) => logFile.end(resolveEnd));
    io.err('stopped');
  }
}

interface LastSeen {
  summary: ConsumerSummary | null;
}

async function reportResumePoint(pool: pg.Pool, consumerId: string, lastSeen: LastSeen, io: RunIo): Promise<void> {
  // A terminal's Ctrl-C also reaches an embedded Postgres, which may be gone by now: then say what was seen last.
  const summary = await consumerSummary(pool, consumerId).catch(() => null);
  const known = summary ?? lastSeen.summary;
  const seen = summary ? '' : ' (last seen; the database had already stopped)';
  io.out(
    known?.state.position != null
      ? `consumer ${consumerId}: committed position ${known.state.position}${seen}, version ${known.state.version}, ${known.executions} executions; the next run resumes from the committed checkpoint`
      : `consumer ${consumerId}: nothing committed yet`,
  );
}

function workerConfig(env: NodeJS.ProcessEnv, stack: DevStack, temporalConfigured: boolean): WorkerConfig {
  // Only the dev server this job started is set here; a configured Temporal keeps its variables and profile.
  const { TEMPORAL_ADDRESS: _address, TEMPORAL_NAMESPACE: _namespace, ...streamAndDatabase } = stack.workerEnv;
  return loadConfig({
    ...env,
    ...(temporalConfigured ? streamAndDatabase : stack.workerEnv),
    // The job always serves metrics: on METRICS_PORT if set, else a free local port (printed at start).
    METRICS_PORT: env.METRICS_PORT ?? '0',
    METRICS_HOST: env.METRICS_HOST ?? '127.0.0.1',
  });
}

async function ensureConsumer(
  session: TemporalSession,
  cmd: RunCommand,
  config: WorkerConfig,
  io: RunIo,
): Promise<void> {
  try {
    const existing = await findConsumer(session, cmd.consumerId);
    if (existing.description.status.name === 'RUNNING') {
      io.out(`consumer ${cmd.consumerId}: already running; resuming (the worker picks its lease up again)`);
      return;
    }
  } catch (error) {
    if (!(error instanceof CliError && error.code === 'unknown_consumer')) throw error;
  }
  // from_floor is this job's explicit first start. A consumer with a saved checkpoint resumes from it instead:
  // the workflow adopts the database's state before it streams.
  await startConsumer(
    session,
    {
      command: 'start',
      consumerId: cmd.consumerId,
      subscriptionId: cmd.subscriptionId,
      filter: cmd.filter,
      start: 'from_floor',
      leaseMs: config.leaseMs,
    },
    io,
  );
}

function printWhereToLook(io: RunIo, { services }: DevStack, cmd: RunCommand, env: NodeJS.ProcessEnv): void {
  const workflowId = consumerWorkflowId(cmd.consumerId);
  if (services.temporal.uiUrl) {
    io.out(
      `Temporal UI: ${services.temporal.uiUrl}/namespaces/${services.temporal.namespace}/workflows/${encodeURIComponent(workflowId)}`,
    );
  }
  // A configured DATABASE_URL may hold a real password: point at it instead of printing it.
  const databaseUrl = env.DATABASE_URL?.trim() ? '"$DATABASE_URL"' : services.databaseUrl;
  io.out(
    `operator CLI against this stack (another terminal):\n` +
      `  DATABASE_URL=${databaseUrl} TEMPORAL_ADDRESS=${services.temporal.address} ${CLI_COMMAND} status --consumer ${cmd.consumerId}`,
  );
}

interface ProgressOptions {
  session: TemporalSession;
  pool: pg.Pool;
  cmd: RunCommand;
  io: RunIo;
  until: Promise<void>;
  /** Updated with every sample, for the goodbye line. */
  lastSeen: LastSeen;
}

interface ProgressLine {
  text: string;
  /** Why the consumer waits and how to resolve it, when it does. */
  stop: string | null;
}

async function showProgress({ session, pool, cmd, io, until, lastSeen }: ProgressOptions): Promise<void> {
  let stopped = false;
  void until.then(() => (stopped = true));
  let lastStop: string | null = null;
  const tty = process.stdout.isTTY === true;
  while (!stopped) {
    const line: ProgressLine = await progressLine(session, pool, cmd, lastSeen).catch((error: unknown) => ({
      text: `progress unavailable: ${error instanceof Error ? error.message : String(error)}`,
      stop: null,
    }));
    if (line.stop && line.stop !== lastStop) io.out(`${tty ? '\n' : ''}${line.stop}`);
    lastStop = line.stop;
    if (tty) process.stdout.write(`\r\x1b[K${line.text}`);
    else io.out(line.text);
    await Promise.race([until, new Promise((resolveTick) => setTimeout(resolveTick, cmd.intervalMs).unref())]);
  }
  if (tty) process.stdout.write('\n');
}

async function progressLine(
  session: TemporalSession,
  pool: pg.Pool,
  cmd: RunCommand,
  lastSeen: LastSeen,
): Promise<ProgressLine> {
  const workflow = await findConsumer(session, cmd.consumerId);
  const heartbeat = streamHeartbeat(workflow.description);
  const [status, summary] = await Promise.all([
    withAnswerTimeout(session, 'status query', () => workflow.handle.query(statusQuery), 3_000).catch(
      (): ConsumerStatus | null => null,
    ),
    consumerSummary(pool, cmd.consumerId),
  ]);
  if (summary) lastSeen.summary = summary;
  const now = Date.now();
  // The same reading, rate window and formats as `status` and the workflow's Current Details.
  const { reading, rate } = consumerProgress({ heartbeat, status }, now);
  const text = [
    new Date(now).toISOString().slice(11, 19),
    (status?.phase ?? workflow.description.status.name.toLowerCase()).padEnd(12),
    formatProgress(reading, rate),
    `gen ${formatCount(summary?.state.generation ?? null)}`,
    `v${formatCount(summary?.state.version ?? null)}`,
    ...effects(summary),
  ].join('  ');
  const stop = status?.stop
    ? `consumer waits: ${status.stop.reason}\n  resolve with: ${status.stop.resolveWith}`
    : null;
  return { text, stop };
}

function effects(summary: ConsumerSummary | null): string[] {
  if (!summary) return ['no checkpoint yet'];
  return [
    `executions ${formatCount(summary.executions)}`,
    `volume ${groupDecimal(summary.totalVolume.replace(/(\.\d{2})\d+$/, '$1'))} USD`,
    ...(summary.heldQuarantine > 0 ? [`held ${formatCount(summary.heldQuarantine)}`] : []),
  ];
}
