// THE MAIN JOB (`npm start`): local services (embedded or configured Postgres, a Temporal dev server with its
// Web UI), migrations, the reference stream with live appends (its journal persisted under the data
// directory, so the next run serves the same history), an in-process worker with the outbox dispatcher, and
// one consumer, started if it is not running (its first start is an explicit from_floor). Progress every
// interval until Ctrl-C; then everything stops in order and the next run resumes where this one stopped.
// WHALEHUNT_URL + WHALEHUNT_API_KEY point it at the real service instead of the reference stream.
import { randomBytes } from 'node:crypto';
import { appendFileSync, createWriteStream, existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type pg from 'pg';
import { createPool, consumerSummary, migrate, type ConsumerSummary } from '../db/index.js';
import { Journal } from '../simulator/journal.js';
import { ReferenceStreamServer } from '../simulator/server.js';
import { ConfigError, loadConfig, type WorkerConfig } from '../worker/config.js';
import type { LocalServices, startLocalServices } from '../worker/local-services.js';
import { JsonLogger } from '../worker/logger.js';
import { installRuntimeWithTelemetry, startWorkerRuntime, type WorkerRuntime } from '../worker/main.js';
import { consumerWorkflowId, statusQuery, type ConsumerStatus } from '../workflows/definitions.js';
import type { CliCommand } from './args.js';
import { startConsumer, type CommandIo } from './commands.js';
import {
  connectTemporal,
  findConsumer,
  streamHeartbeat,
  withAnswerTimeout,
  type TemporalSession,
} from './consumers.js';
import { CliError } from './errors.js';
import { groupDecimal } from './format.js';
import { DUPLICATE_SIGNAL_MS } from './signals.js';

type RunCommand = Extract<CliCommand, { command: 'run' }>;

export interface RunIo extends CommandIo {
  err(text: string): void;
}

/** The reference journal's first run: a few hundred transitions of history to replay before going live. */
const JOURNAL_SEED = 20_260_101;
const JOURNAL_INITIAL_TRANSITIONS = 400;
const RATE_WINDOW_MS = 10_000;

/**
 * Loads local-services. Its embedded Postgres library installs SIGINT/SIGTERM handlers that stop Postgres and
 * exit at once, which would cut the worker's drain short; this job stops Postgres itself, last, so those
 * handlers (exactly the ones the import added) are removed again.
 */
async function importLocalServices(): Promise<{ startLocalServices: typeof startLocalServices }> {
  const signals = ['SIGINT', 'SIGTERM'] as const;
  const before = new Map(signals.map((signal) => [signal, new Set(process.listeners(signal))]));
  const module = await import('../worker/local-services.js');
  for (const signal of signals) {
    for (const listener of process.listeners(signal)) {
      if (!before.get(signal)!.has(listener)) process.off(signal, listener);
    }
  }
  return module;
}

export async function runMainJob(cmd: RunCommand, env: NodeJS.ProcessEnv, io: RunIo): Promise<number> {
  const { startLocalServices } = await importLocalServices();
  const dataDir = resolve(cmd.dataDir);
  await mkdir(join(dataDir, 'logs'), { recursive: true });
  const logPath = join(dataDir, 'logs', 'whalehunt.log');
  const logFile = createWriteStream(logPath, { flags: 'a' });

  /** Undone in reverse order; entries without a name are steps of the shutdown rather than services. */
  const stops: { name: string | null; stop: () => Promise<void> }[] = [];
  const lastSeen: LastSeen = { summary: null };
  let shuttingDown = false;
  let firstSignalAt = 0;
  let wakeShutdown: () => void = () => undefined;
  const shutdownRequested = new Promise<void>((resolveShutdown) => (wakeShutdown = resolveShutdown));
  const onSignal = (signal: NodeJS.Signals): void => {
    if (shuttingDown) {
      // One Ctrl-C can arrive twice (the terminal signals the process group, and tsx relays it again).
      if (Date.now() - firstSignalAt < DUPLICATE_SIGNAL_MS) return;
      io.err(`${signal} again: exiting without waiting (the next run resumes from the last committed checkpoint)`);
      process.exit(130);
    }
    shuttingDown = true;
    firstSignalAt = Date.now();
    io.err(`\n${signal}: shutting down (a commit in progress finishes; Ctrl-C again to exit at once)`);
    wakeShutdown();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    io.out(`whalehunt-consumer: data in ${dataDir}, logs in ${logPath}`);
    const services = await startLocalServices({ dataDir, env, log: (line) => io.err(`  ${line}`) });
    stops.push({ name: 'local services', stop: () => services.stop() });
    if (shuttingDown) return 130;

    const pool = createPool(services.databaseUrl);
    stops.push({ name: 'database pool', stop: () => pool.end() });
    await migrate(pool);
    // Said after the worker drained, while the database is (usually) still up: where the next run resumes.
    stops.push({ name: null, stop: () => reportResumePoint(pool, cmd.consumerId, lastSeen, io) });

    const stream = await openStream(env, dataDir, cmd, io);
    if (stream.server) stops.push({ name: 'reference stream', stop: () => stream.server!.close() });

    const config = workerConfig(env, services, stream);
    const log = new JsonLogger({
      level: config.logLevel,
      secrets: [config.stream.apiKey],
      bindings: { service: 'whalehunt-run', pid: process.pid },
      write: (line) => void logFile.write(line),
    });
    const telemetry = await installRuntimeWithTelemetry(config, log, pool);
    if (telemetry) {
      stops.push({ name: 'metrics endpoint', stop: () => telemetry.close() });
      io.out(`metrics: ${telemetry.url}/metrics (health: ${telemetry.url}/healthz, ${telemetry.url}/readyz)`);
    }
    log.info('main job starting', { consumerId: cmd.consumerId, dataDir, referenceStream: stream.server !== null });
    if (shuttingDown) return 130;

    io.out('starting the worker (bundling workflow code takes a few seconds)...');
    const runtime: WorkerRuntime = await startWorkerRuntime({ config, log, pool, telemetry });
    stops.push({ name: 'worker', stop: () => runtime.shutdown() });
    // A fatal worker error ends the job like Ctrl-C does, with the reason printed.
    runtime.done.catch((error: unknown) => {
      io.err(`worker stopped: ${error instanceof Error ? error.message : String(error)} (details in ${logPath})`);
      wakeShutdown();
    });

    const session = await connectTemporal({
      temporal: services.temporal,
      taskQueue: config.taskQueue,
      databaseUrl: services.databaseUrl,
    });
    stops.push({ name: 'Temporal client', stop: () => session.close() });
    await ensureConsumer(session, cmd, config, io);
    printWhereToLook(io, services, cmd, env);

    await showProgress({ session, pool, cmd, stream, io, until: shutdownRequested, lastSeen });
    return 0;
  } catch (error) {
    if (error instanceof ConfigError) throw new CliError('config_invalid', error.message);
    throw error;
  } finally {
    // Reverse start order: the worker drains while Temporal, the stream and the database are still up.
    for (const { name, stop } of stops.reverse()) {
      try {
        if (name) io.err(`stopping ${name}`);
        await stop();
      } catch (error) {
        io.err(
          `${name ? `stopping ${name}` : 'shutdown step'} failed: ${error instanceof Error ? error.message : String(error)}`,
        );
      }
    }
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
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

interface StreamSource {
  url: string;
  apiKey: string;
  /** null when WHALEHUNT_URL points at the real service. */
  server: ReferenceStreamServer | null;
  journal: Journal | null;
}

async function openStream(env: NodeJS.ProcessEnv, dataDir: string, cmd: RunCommand, io: RunIo): Promise<StreamSource> {
  if (env.WHALEHUNT_URL?.trim()) {
    // The worker's config validates both (and never echoes the key).
    io.out(`stream: the service at WHALEHUNT_URL`);
    return { url: env.WHALEHUNT_URL.trim(), apiKey: env.WHALEHUNT_API_KEY ?? '', server: null, journal: null };
  }
  const journal = await openJournal(join(dataDir, 'reference-journal.jsonl'), io);
  // Tokens are signed: a secret that survives restarts keeps yesterday's saved token valid today.
  const tokenSecret = await persistentSecret(join(dataDir, 'reference-token-secret'));
  const apiKey = `local-${randomBytes(16).toString('hex')}`;
  const server = await ReferenceStreamServer.start({
    journal,
    apiKeys: [apiKey],
    tokenSecret,
    liveAppendRate: 1000 / cmd.appendEveryMs,
  });
  io.out(
    `stream: reference server ${server.url} (history ${journal.historyId}, head ${journal.head}, ${(1000 / cmd.appendEveryMs).toFixed(1)} live transitions/s)`,
  );
  return { url: server.url, apiKey, server, journal };
}

/**
 * Loads the persisted journal, or generates and saves a new one. Every later append is written to the file
 * before the server sees it (this listener is registered first), so whatever was delivered survives a crash.
 */
async function openJournal(path: string, io: RunIo): Promise<Journal> {
  let journal: Journal;
  if (existsSync(path)) {
    journal = await Journal.load(path);
    io.out(`stream: resumed the reference journal ${path} (${journal.size} transitions)`);
  } else {
    journal = Journal.generate({ seed: JOURNAL_SEED, transitions: JOURNAL_INITIAL_TRANSITIONS });
    await journal.save(path);
    io.out(`stream: generated a reference journal of ${journal.size} transitions in ${path}`);
  }
  journal.onAppend((transition) =>
    appendFileSync(path, `${JSON.stringify({ record: 'transition', ...transition })}\n`, 'utf8'),
  );
  return journal;
}

async function persistentSecret(path: string): Promise<string> {
  if (existsSync(path)) return (await readFile(path, 'utf8')).trim();
  const secret = randomBytes(32).toString('hex');
  await writeFile(path, `${secret}\n`, { mode: 0o600 });
  return secret;
}

function workerConfig(env: NodeJS.ProcessEnv, services: LocalServices, stream: StreamSource): WorkerConfig {
  return loadConfig({
    ...env,
    DATABASE_URL: services.databaseUrl,
    TEMPORAL_ADDRESS: services.temporal.address,
    TEMPORAL_NAMESPACE: services.temporal.namespace,
    WHALEHUNT_URL: stream.url,
    WHALEHUNT_API_KEY: stream.apiKey,
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

function printWhereToLook(io: RunIo, services: LocalServices, cmd: RunCommand, env: NodeJS.ProcessEnv): void {
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
      `  DATABASE_URL=${databaseUrl} TEMPORAL_ADDRESS=${services.temporal.address} npm run cli -- status --consumer ${cmd.consumerId}`,
  );
}

interface ProgressOptions {
  session: TemporalSession;
  pool: pg.Pool;
  cmd: RunCommand;
  stream: StreamSource;
  io: RunIo;
  until: Promise<void>;
  /** Updated with every sample, for the goodbye line. */
  lastSeen: LastSeen;
}

/**
 * Events applied per second over a sliding window. The heartbeat counter restarts with each lease and only
 * moves every heartbeat, so single-interval deltas would jump between 0 and double.
 */
class RateMeter {
  private lastCounter: number | null = null;
  private total = 0;
  private readonly window: { at: number; total: number }[] = [];

  constructor(private readonly windowMs: number) {}

  record(at: number, counter: number): number | null {
    if (this.lastCounter !== null) this.total += counter >= this.lastCounter ? counter - this.lastCounter : counter;
    this.lastCounter = counter;
    this.window.push({ at, total: this.total });
    while (this.window.length > 2 && at - this.window[0]!.at > this.windowMs) this.window.shift();
    const first = this.window[0]!;
    return at > first.at ? ((this.total - first.total) * 1000) / (at - first.at) : null;
  }
}

interface ProgressLine {
  text: string;
  /** Why the consumer waits and how to resolve it, when it does. */
  stop: string | null;
}

async function showProgress({ session, pool, cmd, stream, io, until, lastSeen }: ProgressOptions): Promise<void> {
  let stopped = false;
  void until.then(() => (stopped = true));
  const meter = new RateMeter(RATE_WINDOW_MS);
  let lastStop: string | null = null;
  const tty = process.stdout.isTTY === true;
  while (!stopped) {
    const line: ProgressLine = await progressLine(session, pool, cmd, stream, meter, lastSeen).catch(
      (error: unknown) => ({
        text: `progress unavailable: ${error instanceof Error ? error.message : String(error)}`,
        stop: null,
      }),
    );
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
  stream: StreamSource,
  meter: RateMeter,
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
  const position = summary?.state.position ?? null;
  const head = stream.journal?.head ?? heartbeat?.headPosition ?? status?.counters.lastHeadPosition ?? null;
  const rate = meter.record(now, heartbeat?.counters.eventsApplied ?? status?.counters.eventsApplied ?? 0);
  const text = [
    new Date(now).toISOString().slice(11, 19),
    (status?.phase ?? workflow.description.status.name.toLowerCase()).padEnd(12),
    `position ${fmt(position)} / head ${fmt(head)}`,
    `lag ${position !== null && head !== null ? fmt(Math.max(0, head - position)) : '-'}`,
    `${rate === null ? '-' : rate.toFixed(1)} ev/s`,
    `gen ${fmt(summary?.state.generation ?? null)}`,
    `v${fmt(summary?.state.version ?? null)}`,
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
    `executions ${fmt(summary.executions)}`,
    `volume ${groupDecimal(summary.totalVolume.replace(/(\.\d{2})\d+$/, '$1'))} USD`,
    ...(summary.heldQuarantine > 0 ? [`held ${summary.heldQuarantine}`] : []),
  ];
}

function fmt(value: number | null): string {
  return value === null ? '-' : value.toLocaleString('en-US');
}
