// The worker process: `npm run worker` (node dist/worker/main.js, the compiled output). Configuration is read
// once (exit 2 naming every bad variable, never a value); then the pool, migrations, the Temporal connection, the
// worker and the outbox dispatcher alongside it. SIGINT/SIGTERM shut down gracefully: leases in flight stop at a
// checkpoint boundary (a commit in progress finishes, nothing is half-applied), the dispatcher finishes its call,
// the pool closes. Logs are JSON lines on stdout, the API key redacted.
import { setFlagsFromString } from 'node:v8';
import { Runtime } from '@temporalio/worker';
import type pg from 'pg';
import { OutboxDispatcher } from '../activities/outbox.js';
import { createPool, migrate, StorageFailure } from '../db/index.js';
import { backoffDelay, type Backoff } from '../protocol/backoff.js';
import { exitIfStaleBuild } from './build-info.js';
import { ConfigError, loadConfig, redact, type WorkerConfig } from './config.js';
import { isEntryPoint } from './entry-point.js';
import { JsonLogger } from './logger.js';
import { onShutdownSignal } from './shutdown-signal.js';
import { connectNative } from './temporal-connection.js';
import { freeLoopbackPort, prometheusExporter, startWorkerTelemetry, type WorkerTelemetry } from './telemetry.js';
import { WORKER_HELP } from './help.js';
import { PAGE_CRASH_AT_VARIABLE, pageCrashHooks, parsePageCrashAt } from './page-crash.js';
import { createWorker, workflowCode, type ConsumerWorker, type CreateWorkerOptions } from './worker.js';
import { ensureMaintenanceSchedule } from './maintenance-schedule.js';

export const EXIT_CONFIG = 2;
export const EXIT_FAILURE = 1;

/** TEST-ONLY knob: `<afterStage|afterCommit|afterAck>:<position>` kills this process with SIGKILL there. */
export const CRASH_AT_VARIABLE = 'WHALEHUNT_TEST_CRASH_AT';
/**
 * TEST-ONLY knob: `<position>` stops this process with SIGSTOP (once) inside the first commit at or past that
 * position, while it holds the checkpoint row lock: a frozen lock holder for another worker to take over from.
 */
export const FREEZE_IN_COMMIT_VARIABLE = 'WHALEHUNT_TEST_FREEZE_IN_COMMIT_AT';
/** A prebuilt workflow bundle (e.g. built once per test run or at deploy time) instead of bundling at start. */
export const WORKFLOW_BUNDLE_VARIABLE = 'WORKFLOW_BUNDLE_PATH';

export type CrashPoint = 'afterStage' | 'afterCommit' | 'afterAck';
const CRASH_POINTS: readonly CrashPoint[] = ['afterStage', 'afterCommit', 'afterAck'];

/** Parses WHALEHUNT_TEST_CRASH_AT; throws ConfigError naming the variable when it is malformed. */
export function parseCrashAt(value: string | undefined): { point: CrashPoint; position: number } | null {
  if (value === undefined || value.trim() === '') return null;
  const match = /^(\w+):(\d+)$/.exec(value.trim());
  const point = match?.[1] as CrashPoint | undefined;
  const position = Number(match?.[2]);
  if (!point || !CRASH_POINTS.includes(point) || !Number.isSafeInteger(position) || position < 1) {
    throw new ConfigError([{ variable: CRASH_AT_VARIABLE, problem: `must be <${CRASH_POINTS.join('|')}>:<position>` }]);
  }
  return { point, position };
}

/**
 * Hooks that SIGKILL the process the first time the cut point is reached at or past `position` (a filtered
 * stream skips positions, so "reached" means at or beyond). SIGKILL: no handler, no flush, no goodbye.
 */
export function crashHooks(
  crash: { point: CrashPoint; position: number },
  log: JsonLogger,
): NonNullable<CreateWorkerOptions['hooks']> {
  const maybeCrash = (point: CrashPoint) => (position: number) => {
    if (point !== crash.point || position < crash.position) return;
    log.warn('test crash point reached: SIGKILL', { crashAt: point, position });
    process.kill(process.pid, 'SIGKILL');
  };
  return {
    afterStage: maybeCrash('afterStage'),
    afterCommit: maybeCrash('afterCommit'),
    afterAck: maybeCrash('afterAck'),
  };
}

/** Parses WHALEHUNT_TEST_FREEZE_IN_COMMIT_AT; throws ConfigError naming the variable when it is malformed. */
export function parseFreezeInCommitAt(value: string | undefined): number | null {
  if (value === undefined || value.trim() === '') return null;
  const position = Number(value.trim());
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(position) || position < 1) {
    throw new ConfigError([
      { variable: FREEZE_IN_COMMIT_VARIABLE, problem: 'must be a position (a positive integer)' },
    ]);
  }
  return position;
}

/** A hook that SIGSTOPs the process once, inside the first commit reaching `position` (see the variable). */
export function freezeInCommitHook(
  position: number,
  log: JsonLogger,
): Pick<NonNullable<CreateWorkerOptions['hooks']>, 'insideCommit'> {
  let frozen = false;
  return {
    insideCommit(at) {
      if (frozen || at < position) return;
      frozen = true;
      log.warn('test freeze point reached: SIGSTOP with the checkpoint row locked', { position: at });
      process.kill(process.pid, 'SIGSTOP');
    },
  };
}

/** Waits between migration attempts while the database is unreachable at start-up. */
const STARTUP_BACKOFF: Backoff = { maxAttempts: Infinity, initialMs: 500, maxMs: 10_000 };

/**
 * Migrates, waiting out a database that is down or restarting when the worker starts: a transient failure is
 * retried with backoff (one line each), anything else (bad credentials, a broken migration) is thrown.
 */
export async function migrateWhenReachable(pool: pg.Pool, log: JsonLogger): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await migrate(pool);
    } catch (error) {
      if (!(error instanceof StorageFailure) || !error.retryable) throw error;
      const delayMs = backoffDelay(STARTUP_BACKOFF, attempt);
      log.warn('database not reachable at start-up; retrying', { attempt, delayMs, error: error.message });
      await new Promise((resolveDelay) => setTimeout(resolveDelay, delayMs));
    }
  }
}

/**
 * Routes the Temporal SDK's own logs through `logger`; once per process, before any connection. With
 * `prometheusBindAddress`, Core exports the SDK's and the consumer's metrics there.
 */
export function installRuntime(logger: JsonLogger, options: { prometheusBindAddress?: string } = {}): void {
  // No shutdown signals: the process's own handlers decide the order of shutdown (worker, dispatcher, pool).
  // Core's native logs are forwarded too, so stdout holds JSON lines only.
  Runtime.install({
    logger: logger.child({ component: 'temporal' }),
    shutdownSignals: [],
    telemetryOptions: {
      logging: { filter: { core: 'WARN', other: 'ERROR' }, forward: {} },
      ...(options.prometheusBindAddress ? { metrics: prometheusExporter(options.prometheusBindAddress) } : {}),
    },
  });
}

/**
 * installRuntime, plus the METRICS_PORT endpoint when configured: Core's exporter on a private loopback port,
 * served with /healthz and /readyz on METRICS_PORT. Returns null when METRICS_PORT is unset.
 */
export async function installRuntimeWithTelemetry(
  config: WorkerConfig,
  log: JsonLogger,
  pool: pg.Pool,
): Promise<WorkerTelemetry | null> {
  if (!config.metrics) {
    installRuntime(log);
    return null;
  }
  const corePort = await freeLoopbackPort();
  installRuntime(log, { prometheusBindAddress: `127.0.0.1:${corePort}` });
  const telemetryLog = log.child({ component: 'telemetry' });
  const telemetry = await startWorkerTelemetry({
    ...config.metrics,
    metricsUpstream: `http://127.0.0.1:${corePort}/metrics`,
    meter: Runtime.instance().metricMeter,
    pool,
    onError: (message, fields) => telemetryLog.warn(message, fields),
  });
  log.info('metrics endpoint listening', {
    metrics: `${telemetry.url}/metrics`,
    healthz: `${telemetry.url}/healthz`,
    readyz: `${telemetry.url}/readyz`,
  });
  return telemetry;
}

export interface WorkerRuntimeOptions {
  config: WorkerConfig;
  log: JsonLogger;
  pool: pg.Pool;
  workflowBundlePath?: string;
  hooks?: CreateWorkerOptions['hooks'];
  /** The process's endpoint: the activities report to its metrics, /readyz asks this worker. */
  telemetry?: WorkerTelemetry | null;
  pageHooks?: CreateWorkerOptions['pageHooks'];
}

export interface WorkerRuntime {
  /** Settles when the worker stopped (after shutdown(), or on a fatal worker error). */
  done: Promise<void>;
  /** Drains the worker, then stops the dispatcher and closes the Temporal connection. Idempotent. */
  shutdown(): Promise<void>;
}

/**
 * The worker and the outbox dispatcher on one Temporal connection; shared by this process entry and the
 * CLI's main job. The pool belongs to the caller (it is closed after shutdown, by whoever opened it).
 */
export async function startWorkerRuntime(options: WorkerRuntimeOptions): Promise<WorkerRuntime> {
  const { config, log, pool } = options;
  // Read by V8 each time it sizes the heap after a collection, so setting it now applies to the whole run.
  if (config.heapGrowthPercent !== null) setFlagsFromString(`--heap-growing-percent=${config.heapGrowthPercent}`);
  const connection = await connectNative(config.temporal);
  const workflows = workflowCode(
    options.workflowBundlePath ? { workflowBundle: { codePath: options.workflowBundlePath } } : {},
  );
  let consumerWorker: ConsumerWorker;
  try {
    consumerWorker = await createWorker({
      config,
      pool,
      connection,
      log: log.child({ component: 'activities' }),
      ...(options.telemetry ? { metrics: options.telemetry.metrics } : {}),
      ...workflows,
      ...(options.hooks ? { hooks: options.hooks } : {}),
      ...(options.pageHooks ? { pageHooks: options.pageHooks } : {}),
    });
  } catch (error) {
    await connection.close();
    throw error;
  }

  await maintenanceSchedule(connection, config, log);

  const webhookUrl = config.whaleAlert.webhookUrl;
  const dispatcher = webhookUrl
    ? new OutboxDispatcher({
        pool,
        webhookUrl,
        signingSecrets: config.whaleAlert.signingSecrets,
        concurrency: config.whaleAlert.concurrency,
        webhookTimeoutMs: config.whaleAlert.timeoutMs,
        log: log.child({ component: 'outbox' }),
        ...(options.telemetry ? { metrics: options.telemetry.metrics } : {}),
      })
    : null;
  if (dispatcher) dispatcher.start();
  else if (config.whaleAlert.minNotional !== null) {
    log.warn('whale alerts are written to the outbox but WHALE_ALERT_WEBHOOK_URL is not set: nothing sends them');
  }

  const cleanup = async (): Promise<void> => {
    options.telemetry?.attach(null);
    await dispatcher?.stop();
    await connection.close();
  };
  const done = consumerWorker.run().finally(cleanup);
  options.telemetry?.attach({
    checkTemporal: async () => {
      await connection.healthService.check({});
      return { ok: true };
    },
    polling: () => {
      const state = consumerWorker.worker.getState();
      return state === 'RUNNING' ? { ok: true } : { ok: false, detail: `worker ${state.toLowerCase()}` };
    },
  });
  log.info('worker running', {
    taskQueue: config.taskQueue,
    namespace: config.temporal.namespace,
    // A prebuilt bundle, or the workflow sources bundled at start.
    workflows: 'workflowBundle' in workflows ? workflows.workflowBundle.codePath : workflows.workflowsPath,
    outboxDispatcher: dispatcher !== null,
    heapGrowthPercent: config.heapGrowthPercent ?? 'off',
  });

  let stopping: Promise<void> | null = null;
  return {
    done,
    shutdown: () =>
      (stopping ??= (async () => {
        log.info('worker shutting down: leases stop at their next checkpoint boundary');
        await consumerWorker.shutdown();
        await done;
      })()),
  };
}

/**
 * Creates the maintenance schedule unless it exists (or MAINTENANCE_EVERY is off); one line says which. A failure
 * is logged and the worker goes on: consuming does not depend on it, and the next start tries again.
 */
async function maintenanceSchedule(
  connection: Parameters<typeof ensureMaintenanceSchedule>[0],
  config: WorkerConfig,
  log: JsonLogger,
): Promise<void> {
  try {
    const { schedule, scheduleId } = await ensureMaintenanceSchedule(connection, config);
    const every = config.maintenance?.every ?? 'off';
    if (schedule === 'created') log.info('maintenance schedule created', { scheduleId, every });
    else if (schedule === 'exists') log.info('maintenance schedule exists; left as it is', { scheduleId });
    else log.info('maintenance schedule off (MAINTENANCE_EVERY=off); an existing one is left as it is', { scheduleId });
  } catch (error) {
    log.warn('could not create the maintenance schedule; maintenance runs only when asked', { error });
  }
}

/** The process entry; resolves to the exit code. */
export async function main(
  env: NodeJS.ProcessEnv = process.env,
  args: readonly string[] = process.argv.slice(2),
): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(WORKER_HELP);
    return 0;
  }
  let config: WorkerConfig;
  let crash: ReturnType<typeof parseCrashAt>;
  let freezeAt: number | null;
  let pageCrash: ReturnType<typeof parsePageCrashAt>;
  try {
    config = loadConfig(env);
    crash = parseCrashAt(env[CRASH_AT_VARIABLE]);
    freezeAt = parseFreezeInCommitAt(env[FREEZE_IN_COMMIT_VARIABLE]);
    pageCrash = parsePageCrashAt(env[PAGE_CRASH_AT_VARIABLE]);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    // One line per variable, no values: one of them is the API key.
    process.stderr.write(
      `whalehunt worker: invalid configuration\n${error.problems.map((p) => `  ${p.variable}: ${p.problem}\n`).join('')}`,
    );
    return EXIT_CONFIG;
  }

  const log = new JsonLogger({
    level: config.logLevel,
    format: config.logFormat,
    secrets: [config.stream.apiKey, ...config.temporal.secrets()],
    bindings: { service: 'whalehunt-worker', pid: process.pid },
  });
  const dbLog = log.child({ component: 'database' });
  const pool = createPool(config.databaseUrl, {
    max: config.databasePoolSize,
    bounds: config.databaseBounds,
    // One line when the database is lost (however it was seen) and one when it is back: the runs in flight fail,
    // the workflow waits for the database to answer and the next run resumes from the committed checkpoint.
    onConnectionLost: (error) =>
      dbLog.error('database connection lost; runs retry from the committed checkpoint until it is back', {
        error: { name: error.name, message: error.message, code: (error as { code?: unknown }).code },
      }),
    onConnectionRestored: (downMs) => dbLog.info('database connection restored', { downMs }),
  });
  let telemetry: WorkerTelemetry | null;
  try {
    telemetry = await installRuntimeWithTelemetry(config, log, pool);
  } catch (error) {
    log.error('metrics endpoint failed to start', { error });
    await pool.end();
    return EXIT_FAILURE;
  }
  log.info('starting', {
    config: redact(config),
    ...(crash ? { testCrashAt: crash } : {}),
    ...(freezeAt !== null ? { testFreezeInCommitAt: freezeAt } : {}),
    ...(pageCrash ? { testPageCrashAt: pageCrash } : {}),
  });
  const hooks: CreateWorkerOptions['hooks'] = {
    ...(crash ? crashHooks(crash, log) : {}),
    ...(freezeAt !== null ? freezeInCommitHook(freezeAt, log) : {}),
  };
  let runtime: WorkerRuntime | null = null;
  // Kept until the process exits: a duplicate Ctrl-C arriving while the pool closes is still ignored.
  onShutdownSignal({
    graceful: (signal) => {
      if (runtime) {
        log.info('signal received', { signal });
        // A failed drain also rejects runtime.done, where main reports it.
        runtime.shutdown().catch(() => undefined);
      } else {
        // Nothing runs yet (still migrating or connecting): nothing to drain.
        log.info('signal received before the worker started; exiting', { signal });
        process.exit(130);
      }
    },
    forced: (signal) => {
      log.warn('second signal: exiting without draining; the next run resumes from the last committed checkpoint', {
        signal,
      });
      process.exit(130);
    },
  });

  try {
    await migrateWhenReachable(pool, dbLog);
    runtime = await startWorkerRuntime({
      config,
      log,
      pool,
      ...(env[WORKFLOW_BUNDLE_VARIABLE] ? { workflowBundlePath: env[WORKFLOW_BUNDLE_VARIABLE] } : {}),
      ...(crash || freezeAt !== null ? { hooks } : {}),
      telemetry,
      ...(pageCrash ? { pageHooks: pageCrashHooks(pageCrash, log) } : {}),
    });
    await runtime.done;
    log.info('worker stopped');
    return 0;
  } catch (error) {
    log.error('worker failed', { error });
    await runtime?.shutdown().catch(() => undefined);
    return EXIT_FAILURE;
  } finally {
    await telemetry?.close();
    await pool.end();
  }
}

if (isEntryPoint(import.meta.url)) {
  exitIfStaleBuild('whalehunt worker');
  main().then(
    // Exit explicitly: everything was drained and closed, and native handles must not keep the process up.
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(
        `whalehunt worker: unexpected failure: ${error instanceof Error ? error.message : String(error)}\n`,
      );
      process.exit(EXIT_FAILURE);
    },
  );
}
