// Wires a Temporal Worker for the consumer: the workflow code (a prebuilt bundle or workflows/index.ts),
// the activities bound to a Postgres pool and the parsed configuration. Used in-process by tests, by
// worker/main.ts (the process entry) and by the CLI's main job.
import { fileURLToPath } from 'node:url';
import { Worker, type NativeConnection } from '@temporalio/worker';
import type pg from 'pg';
import { createActivities, type Activities, type ActivityDeps } from '../activities/index.js';
import type { ConsumeStreamLog } from '../activities/consume-stream.js';
import type { WorkerConfig } from './config.js';
import { JsonLogger } from './logger.js';

export const DEFAULT_WORKFLOWS_PATH = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));

export interface CreateWorkerOptions {
  config: WorkerConfig;
  pool: pg.Pool;
  connection: NativeConnection;
  /** A prebuilt bundle (tests build one per run); otherwise `workflowsPath` is bundled at start. */
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
  const worker = await Worker.create({
    connection: options.connection,
    namespace: config.temporal.namespace,
    taskQueue: config.taskQueue,
    ...(options.workflowBundle
      ? { workflowBundle: options.workflowBundle }
      : { workflowsPath: options.workflowsPath ?? DEFAULT_WORKFLOWS_PATH }),
    activities: { ...activities, ...options.overrideActivities?.(activities) },
    maxConcurrentActivityTaskExecutions: config.maxConcurrentActivities,
    // Cancel running leases as soon as shutdown starts: they finish the commit in progress and return.
    shutdownGraceTime: 0,
    shutdownForceTime: options.shutdownForceTimeMs ?? 60_000,
    // Heartbeats (and with them pause/rebind cancellations) reach the server within ~2 s.
    maxHeartbeatThrottleInterval: 2_000,
    // After a kill -9 the workflow task that reacts to the timed-out lease waits on the dead worker's sticky queue
    // this long before another worker gets it: it bounds the takeover beyond the heartbeat timeout (default 10 s;
    // 2 s measured a median takeover of heartbeat timeout + 3.0 s over 20 kills). The cost of a short one: a live
    // worker slower than this to pick up its sticky task loses its cached workflow and another worker replays the
    // history, which continue-as-new keeps short.
    stickyQueueScheduleToStartTimeout: 1_000,
  });

  let running: Promise<void> | null = null;
  const run = (): Promise<void> => (running ??= worker.run());
  return {
    worker,
    run,
    async shutdown() {
      if (running === null) {
        // Never ran: nothing is in flight, but the worker's native resources still need releasing.
        running = worker.run();
        worker.shutdown();
      } else if (worker.getState() === 'RUNNING') {
        worker.shutdown();
      }
      await running;
    },
  };
}
