// Wires a Temporal Worker for the consumer: the workflow code (a prebuilt bundle or workflows/index.ts),
// the activities bound to a Postgres pool and the parsed configuration. Used in-process by tests, by
// worker/main.ts (the process entry) and by the CLI's main job.
import { join } from 'node:path';
import { Worker, type NativeConnection } from '@temporalio/worker';
import type pg from 'pg';
import { createActivities, type Activities, type ActivityDeps } from '../activities/index.js';
import type { ConsumeStreamLog } from '../activities/stream-ports.js';
import { leaseTaskQueue } from '../workflows/definitions.js';
import { COMPILED, PACKAGE_ROOT, WORKFLOW_BUNDLE_FILE, WORKFLOW_BUNDLER_OPTIONS } from './build-info.js';
import type { WorkerConfig } from './config.js';
import { JsonLogger } from './logger.js';

/**
 * The workflow code when none is given: the compiled output loads the bundle its build wrote (no webpack run at
 * start); the sources (tsx) bundle workflows/index.ts as the worker starts, so an edit needs no build.
 */
export const DEFAULT_WORKFLOW_CODE: { workflowBundle: { codePath: string } } | { workflowsPath: string } = COMPILED
  ? { workflowBundle: { codePath: WORKFLOW_BUNDLE_FILE } }
  : { workflowsPath: join(PACKAGE_ROOT, 'workflows/index.ts') };

export interface CreateWorkerOptions {
  config: WorkerConfig;
  pool: pg.Pool;
  connection: NativeConnection;
  /** A prebuilt bundle (tests build one per run), or sources bundled at start; neither: DEFAULT_WORKFLOW_CODE. */
  workflowBundle?: { codePath: string };
  workflowsPath?: string;
  /** Test cut points inside the streaming run. */
  hooks?: ActivityDeps['hooks'];
  /** Test cut points inside the page run. */
  pageHooks?: ActivityDeps['pageHooks'];
  /** Replaces the streaming run's lease/commit store (tests inject commit failures). */
  store?: ActivityDeps['store'];
  /** Where the activities report metrics (default: nowhere). */
  metrics?: ActivityDeps['metrics'];
  /** Where activity logs go (default: JSON lines on stdout, the API key redacted). */
  log?: ConsumeStreamLog;
  /** Replaces single activities (tests wrap one to misbehave, e.g. a zombie attempt). */
  overrideActivities?: (activities: Activities) => Partial<Activities>;
  /** Longest wait for in-flight runs to reach a checkpoint boundary on shutdown before the worker gives up. */
  shutdownForceTimeMs?: number;
}

export interface ConsumerWorker {
  worker: Worker;
  /** Runs until shutdown; the same promise on every call. */
  run(): Promise<void>;
  /**
   * Cancels in-flight runs (they stop at a checkpoint boundary: a commit in progress finishes) and waits for the worker
   * to stop.
   */
  shutdown(): Promise<void>;
}

/** Where this worker's workflow code comes from; also logged when the worker process starts. */
export function workflowCode(
  options: Pick<CreateWorkerOptions, 'workflowBundle' | 'workflowsPath'>,
): typeof DEFAULT_WORKFLOW_CODE {
  if (options.workflowBundle) return { workflowBundle: options.workflowBundle };
  if (options.workflowsPath) return { workflowsPath: options.workflowsPath };
  return DEFAULT_WORKFLOW_CODE;
}

export async function createWorker(options: CreateWorkerOptions): Promise<ConsumerWorker> {
  const { config } = options;
  const log =
    options.log ??
    new JsonLogger({ level: config.logLevel, secrets: [config.stream.apiKey], bindings: { component: 'activities' } });
  const activities = createActivities({
    pool: options.pool,
    config,
    log,
    ...(options.hooks ? { hooks: options.hooks } : {}),
    ...(options.pageHooks ? { pageHooks: options.pageHooks } : {}),
    ...(options.store ? { store: options.store } : {}),
    ...(options.metrics ? { metrics: options.metrics } : {}),
  });
  const allActivities = { ...activities, ...options.overrideActivities?.(activities) };
  const sharedOptions = {
    // Cancel running leases as soon as shutdown starts: they finish the commit in progress and return.
    shutdownGraceTime: 0,
    shutdownForceTime: options.shutdownForceTimeMs ?? 60_000,
    // A run's heartbeat reaches the server as often as the run gives one (HEARTBEAT_MS), well inside the heartbeat
    // timeout; with it a pause or a rebind's cancellation reaches the run as fast.
    maxHeartbeatThrottleInterval: config.stream.heartbeatEveryMs,
  };
  const code = workflowCode(options);
  const worker = await Worker.create({
    connection: options.connection,
    namespace: config.temporal.namespace,
    taskQueue: config.taskQueue,
    ...code,
    // The SDK bundles workflowsPath as it starts; a prebuilt bundle was bundled with them already.
    ...('workflowsPath' in code ? { bundlerOptions: WORKFLOW_BUNDLER_OPTIONS } : {}),
    // consumeStream stays here for executions whose history ran leases on this queue (before the lease queue).
    activities: allActivities,
    maxConcurrentActivityTaskExecutions: config.maxConcurrentActivities,
    ...sharedOptions,
    // After a kill -9 the workflow task that reacts to a stopped run waits on the dead worker's sticky queue this
    // long before another worker gets it (default 10 s). The cost of a short one: a live worker slower than this to
    // pick up its sticky task loses its cached workflow and another worker replays the history, which
    // continue-as-new keeps short.
    stickyQueueScheduleToStartTimeout: 1_000,
  });
  // The streaming leases: one poller, so a frozen worker holds at most one lease task it cannot start (the server
  // hands a task to any open poll, a frozen process's too), and a retried lease goes to a live worker next.
  const leaseWorker = await Worker.create({
    connection: options.connection,
    namespace: config.temporal.namespace,
    taskQueue: leaseTaskQueue(config.taskQueue),
    activities: { consumeStream: allActivities.consumeStream },
    maxConcurrentActivityTaskExecutions: config.maxConcurrentActivities,
    activityTaskPollerBehavior: { type: 'simple-maximum', maximum: 1 },
    ...sharedOptions,
  });

  const workers = [worker, leaseWorker];
  let running: Promise<void> | null = null;
  // One stops, both stop: a worker that polls only one of the queues would hold leases no workflow task follows.
  const run = (): Promise<void> =>
    (running ??= Promise.allSettled(
      workers.map((w) =>
        w.run().finally(() => {
          for (const other of workers) if (other.getState() === 'RUNNING') other.shutdown();
        }),
      ),
    ).then((ends) => {
      for (const end of ends) if (end.status === 'rejected') throw end.reason;
    }));
  return {
    worker,
    run,
    async shutdown() {
      if (running === null) {
        // Never ran: nothing is in flight, but the workers' native resources still need releasing.
        running = run();
        for (const w of workers) w.shutdown();
      } else {
        for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
      }
      await running;
    },
  };
}
