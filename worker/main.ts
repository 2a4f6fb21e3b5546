// The worker process: `npm run worker` (tsx worker/main.ts). Configuration is read once (exit 2 naming every
// bad variable, never a value); then the pool, migrations, the Temporal connection, the worker and the outbox
// dispatcher alongside it. SIGINT/SIGTERM shut down gracefully: leases in flight stop at a checkpoint boundary
// (a commit in progress finishes, nothing is half-applied), the dispatcher finishes its call, the pool closes.
// Logs are JSON lines on stdout, the API key redacted.
import { NativeConnection, Runtime } from '@temporalio/worker';
import type pg from 'pg';
import { OutboxDispatcher } from '../activities/outbox.js';
import { createPool, migrate } from '../db/index.js';
import { ConfigError, loadConfig, redact, type WorkerConfig } from './config.js';
import { isEntryPoint } from './entry-point.js';
import { JsonLogger } from './logger.js';
import { PAGE_CRASH_AT_VARIABLE, pageCrashHooks, parsePageCrashAt } from './page-crash.js';
import { createWorker, type ConsumerWorker, type CreateWorkerOptions } from './worker.js';

export const EXIT_CONFIG = 2;
export const EXIT_FAILURE = 1;
/** A second signal this soon after the first is the same Ctrl-C delivered twice, not a request to force. */
const DUPLICATE_SIGNAL_MS = 1_000;

/** TEST-ONLY knob: `<afterStage|afterCommit|afterAck>:<position>` kills this process with SIGKILL there. */
export const CRASH_AT_VARIABLE = 'WHALEHUNT_TEST_CRASH_AT';
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

/** Routes the Temporal SDK's own logs through `logger`; once per process, before any connection. */
export function installRuntime(logger: JsonLogger): void {
  // No shutdown signals: the process's own handlers decide the order of shutdown (worker, dispatcher, pool).
  // Core's native logs are forwarded too, so stdout holds JSON lines only.
  Runtime.install({
    logger: logger.child({ component: 'temporal' }),
    shutdownSignals: [],
    telemetryOptions: { logging: { filter: { core: 'WARN', other: 'ERROR' }, forward: {} } },
  });
}

export interface WorkerRuntimeOptions {
  config: WorkerConfig;
  log: JsonLogger;
  pool: pg.Pool;
  workflowBundlePath?: string;
  hooks?: CreateWorkerOptions['hooks'];
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
  const connection = await NativeConnection.connect({ address: config.temporal.address });
  let consumerWorker: ConsumerWorker;
  try {
    consumerWorker = await createWorker({
      config,
      pool,
      connection,
      log: log.child({ component: 'activities' }),
      ...(options.workflowBundlePath ? { workflowBundle: { codePath: options.workflowBundlePath } } : {}),
      ...(options.hooks ? { hooks: options.hooks } : {}),
      ...(options.pageHooks ? { pageHooks: options.pageHooks } : {}),
    });
  } catch (error) {
    await connection.close();
    throw error;
  }

  const webhookUrl = config.whaleAlert.webhookUrl;
  const dispatcher = webhookUrl
    ? new OutboxDispatcher({ pool, webhookUrl, log: log.child({ component: 'outbox' }) })
    : null;
  if (dispatcher) dispatcher.start();
  else if (config.whaleAlert.minNotional !== null) {
    log.warn('whale alerts are written to the outbox but WHALE_ALERT_WEBHOOK_URL is not set: nothing sends them');
  }

  const cleanup = async (): Promise<void> => {
    await dispatcher?.stop();
    await connection.close();
  };
  const done = consumerWorker.run().finally(cleanup);
  log.info('worker running', {
    taskQueue: config.taskQueue,
    namespace: config.temporal.namespace,
    outboxDispatcher: dispatcher !== null,
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

/** The process entry; resolves to the exit code. */
export async function main(env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let config: WorkerConfig;
  let crash: ReturnType<typeof parseCrashAt>;
  let pageCrash: ReturnType<typeof parsePageCrashAt>;
  try {
    config = loadConfig(env);
    crash = parseCrashAt(env[CRASH_AT_VARIABLE]);
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
    secrets: [config.stream.apiKey],
    bindings: { service: 'whalehunt-worker', pid: process.pid },
  });
  installRuntime(log);
  log.info('starting', {
    config: redact(config),
    ...(crash ? { testCrashAt: crash } : {}),
    ...(pageCrash ? { testPageCrashAt: pageCrash } : {}),
  });

  const pool = createPool(config.databaseUrl);
  let runtime: WorkerRuntime | null = null;
  let firstSignalAt: number | null = null;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (firstSignalAt !== null) {
      // One Ctrl-C can arrive twice (the terminal signals the process group, and tsx relays it again).
      if (Date.now() - firstSignalAt < DUPLICATE_SIGNAL_MS) return;
      log.warn('second signal: exiting without draining; the next run resumes from the last committed checkpoint', {
        signal,
      });
      process.exit(130);
    }
    firstSignalAt = Date.now();
    if (runtime) {
      log.info('signal received', { signal });
      // A failed drain also rejects runtime.done, where main reports it.
      runtime.shutdown().catch(() => undefined);
    } else {
      // Nothing runs yet (still migrating or connecting): nothing to drain.
      log.info('signal received before the worker started; exiting', { signal });
      process.exit(130);
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    await migrate(pool);
    runtime = await startWorkerRuntime({
      config,
      log,
      pool,
      ...(env[WORKFLOW_BUNDLE_VARIABLE] ? { workflowBundlePath: env[WORKFLOW_BUNDLE_VARIABLE] } : {}),
      ...(crash ? { hooks: crashHooks(crash, log) } : {}),
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
    await pool.end();
  }
}

if (isEntryPoint(import.meta.url)) {
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
