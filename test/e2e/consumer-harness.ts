// The full consumer stack for e2e tests: a reference stream server over a hand-built journal, the real
// worker (createWorker with the run's shared workflow bundle, real activities on the file's Postgres
// database) and a Temporal client. Every started workflow's history is kept for the replay check.
import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Client, WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { NativeConnection } from '@temporalio/worker';
import type pg from 'pg';
import type { StreamFilter } from '../../protocol/codec.js';
import { ReferenceStreamServer, type ReferenceServerOptions } from '../../simulator/server.js';
import { Journal } from '../../simulator/journal.js';
import type { NewEvent, NewTransition } from '../../simulator/journal-types.js';
import { poolStore, type Activities, type ActivityDeps } from '../../activities/index.js';
import { loadConfig, type WorkerConfig } from '../../worker/config.js';
import { JsonLogger } from '../../worker/logger.js';
import { createWorker } from '../../worker/worker.js';
import type { consumerWorkflow } from '../../workflows/consumer.js';
import {
  consumerIdSearchAttribute,
  consumerWorkflowId,
  phaseSearchAttribute,
  statusQuery,
  type ConsumerPhase,
  type ConsumerStatus,
  type ConsumerWorkflowInput,
} from '../../workflows/definitions.js';
import type { TestDatabase } from '../support/db.js';
import type { Resources } from '../support/leaks.js';
import {
  createTestClient,
  sharedWorkflowBundlePath,
  temporalTarget,
  uniqueTaskQueue,
  waitForQuery,
} from '../support/temporal.js';

/** Distinctive, so a search of every history and log line for it means something. */
export const API_KEY = `wh-e2e-secret-${randomUUID()}`;

export type ConsumerHandle = WorkflowHandleWithFirstExecutionRunId<typeof consumerWorkflow>;

/**
 * Every line the activities of a file's stacks logged (unredacted: the check that no key is logged means something).
 */
export const recordedLogLines: string[] = [];

/** Histories of every workflow a file started, for the replay test at its end. */
export const recordedHistories: { workflowId: string; history: temporal.api.history.v1.IHistory }[] = [];

export interface StackOptions {
  journal: Journal;
  server?: Partial<Omit<ReferenceServerOptions, 'journal' | 'apiKeys'>>;
  /** Wraps the real lease/commit store (e.g. to fail one commit). */
  store?: (real: NonNullable<ActivityDeps['store']>) => NonNullable<ActivityDeps['store']>;
  /** Replaces single activities; gets the stack's configuration (e.g. to run a misbehaving streaming core). */
  overrideActivities?: (activities: Activities, context: { config: WorkerConfig }) => Partial<Activities>;
  env?: Record<string, string>;
}

export interface ConsumerStack {
  server: ReferenceStreamServer;
  client: Client;
  config: WorkerConfig;
  taskQueue: string;
  /** Every line the activities logged (the API key must never be in one). */
  logLines: string[];
  startConsumer(input: Partial<ConsumerWorkflowInput> & { consumerId: string }): Promise<ConsumerHandle>;
  /** Remembers a workflow whose history the file's replay test checks. */
  track(handle: WorkflowHandle): void;
  /** Shuts the worker down gracefully, runs `between` with no worker polling, then starts a new one. */
  restartWorker(between: () => Promise<void>): Promise<void>;
}

/**
 * A test worker's environment (in-process through loadConfig, or a child process's env): the file's database,
 * the run's Temporal server, the stream and its key, with heartbeats and reconnects short enough for tests, and no
 * maintenance schedule.
 */
export function testWorkerEnv(target: {
  databaseUrl: string;
  taskQueue: string;
  streamUrl: string;
  apiKey: string;
}): Record<string, string> {
  return {
    DATABASE_URL: target.databaseUrl,
    TEMPORAL_ADDRESS: temporalTarget().address,
    TEMPORAL_NAMESPACE: temporalTarget().namespace,
    TASK_QUEUE: target.taskQueue,
    WHALEHUNT_URL: target.streamUrl,
    WHALEHUNT_API_KEY: target.apiKey,
    HEARTBEAT_MS: '200',
    RECONNECT_INITIAL_MS: '50',
    RECONNECT_MAX_MS: '200',
    // A worker process would create an hourly maintenance schedule of its task queue: only the tests of it want one.
    MAINTENANCE_EVERY: 'off',
  };
}

/** The checkpoint row as saved (no lease epoch, so a later attempt leaves it equal when nothing was committed). */
export async function savedCheckpoint(
  pool: pg.Pool,
  consumerId: string,
): Promise<{ position: number; token: string; version: number }> {
  const { rows } = await pool.query<{ position: string; token: string; version: number }>(
    'SELECT position, token, version FROM checkpoints WHERE consumer_id = $1',
    [consumerId],
  );
  return { position: Number(rows[0]!.position), token: rows[0]!.token, version: rows[0]!.version };
}

/** Runs `fn` with the stack up; always shuts the worker down and closes everything, then records histories. */
export async function withConsumerStack<T>(
  res: Resources,
  db: TestDatabase,
  options: StackOptions,
  fn: (stack: ConsumerStack) => Promise<T>,
): Promise<T> {
  const server = res.track(
    await ReferenceStreamServer.start({
      journal: options.journal,
      apiKeys: [API_KEY],
      checkpointEvery: 2,
      ...options.server,
    }),
    (s) => s.close(),
    'reference stream server',
  );
  const testClient = res.track(await createTestClient());
  const connection = res.track(
    await NativeConnection.connect({ address: temporalTarget().address }),
    (c) => c.close(),
    'worker connection',
  );
  const taskQueue = uniqueTaskQueue('consumer');
  const config = loadConfig({
    ...testWorkerEnv({ databaseUrl: db.url, taskQueue, streamUrl: server.url, apiKey: API_KEY }),
    CONNECT_TIMEOUT_MS: '5000',
    LOG_LEVEL: 'WARN',
    ...options.env,
  });
  const logLines: string[] = [];
  const log = new JsonLogger({
    level: 'INFO',
    secrets: [],
    write: (line) => {
      logLines.push(line);
      recordedLogLines.push(line);
    },
  });
  const realStore = poolStore(db.pool);
  const newWorker = () =>
    createWorker({
      config,
      pool: db.pool,
      connection,
      workflowBundle: { codePath: sharedWorkflowBundlePath() },
      log,
      ...(options.store ? { store: options.store(realStore) } : {}),
      ...(options.overrideActivities
        ? { overrideActivities: (activities: Activities) => options.overrideActivities!(activities, { config }) }
        : {}),
      shutdownForceTimeMs: 20_000,
    });
  let worker = await newWorker();
  let running = worker.run();
  const handles: WorkflowHandle[] = [];
  const stack: ConsumerStack = {
    server,
    client: testClient.client,
    config,
    taskQueue,
    logLines,
    async startConsumer(input) {
      const handle = await testClient.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
        taskQueue,
        workflowId: consumerWorkflowId(input.consumerId),
        args: [
          {
            subscriptionId: `sub-${input.consumerId}`,
            filter: {},
            initialStart: 'from_floor',
            // Short leases: the workflow learns a run's committed checkpoint when its lease ends, and the tests wait
            // on that (status, Current Details); a test that needs a run to outlast something sets its own.
            leaseMs: 1_000,
            ...input,
            tuning: {
              heartbeatTimeoutMs: 5_000,
              backoffInitialMs: 1_000,
              backoffMaxMs: 2_000,
              ...input.tuning,
            },
          },
        ],
        typedSearchAttributes: [
          { key: consumerIdSearchAttribute, value: input.consumerId },
          { key: phaseSearchAttribute, value: 'streaming' },
        ],
      });
      handles.push(handle);
      return handle;
    },
    track(handle) {
      handles.push(handle);
    },
    async restartWorker(between) {
      await worker.shutdown();
      await running;
      await between();
      worker = await newWorker();
      running = worker.run();
    },
  };
  try {
    return await fn(stack);
  } finally {
    await worker.shutdown();
    await running;
    for (const handle of handles) {
      const described = await handle.describe();
      if (described.status.name === 'RUNNING') await handle.terminate('test finished');
      const history = await handle.fetchHistory();
      recordedHistories.push({ workflowId: handle.workflowId, history });
      await saveHistory(handle.workflowId, history);
    }
    await res.close(connection);
    await res.close(testClient);
    await res.close(server);
  }
}

/**
 * WHALEHUNT_RECORD_HISTORIES=<dir> writes every history as JSON (how test/fixtures/histories were made).
 * protobufjs's own object form (numeric event ids, base64 bytes), which Worker.runReplayHistory takes as is:
 * the SDK's proto3-JSON helpers fail in this tree (two protobufjs copies).
 */
async function saveHistory(workflowId: string, history: temporal.api.history.v1.IHistory): Promise<void> {
  const dir = process.env.WHALEHUNT_RECORD_HISTORIES;
  if (!dir) return;
  await mkdir(dir, { recursive: true });
  const plain = temporal.api.history.v1.History.toObject(temporal.api.history.v1.History.fromObject(history), {
    longs: Number,
    bytes: String,
  });
  await writeFile(join(dir, `${workflowId.replace(/[^\w.-]+/g, '_')}.json`), `${JSON.stringify(plain, null, 1)}\n`);
}

/** Waits until the consumer's status query matches. */
export function waitForStatus(
  handle: WorkflowHandle<typeof consumerWorkflow>,
  description: string,
  predicate: (status: ConsumerStatus) => boolean,
  timeoutMs = 60_000,
): Promise<ConsumerStatus> {
  return waitForQuery(handle, statusQuery, predicate, { description, timeoutMs });
}

export function waitForPhase(
  handle: WorkflowHandle<typeof consumerWorkflow>,
  phase: ConsumerPhase,
  timeoutMs = 60_000,
): Promise<ConsumerStatus> {
  return waitForStatus(handle, `phase ${phase}`, (s) => s.phase === phase, timeoutMs);
}

/**
 * The message of the failure an update was rejected with (its validator's or handler's error); throws if it was
 * accepted.
 */
export async function updateRejection(update: Promise<unknown>): Promise<string> {
  const outcome = await update.then(
    () => null,
    (error: unknown) => error,
  );
  if (outcome === null) throw new Error('the update was accepted, expected a rejection');
  if (!(outcome instanceof Error))
    throw new Error('the update failed with something that is not an Error', { cause: outcome });
  return outcome.cause instanceof Error ? outcome.cause.message : outcome.message;
}

/** Rejects with a named timeout when `promise` (e.g. a server's waitForAck) does not settle in time. */
export async function within<T>(promise: Promise<T>, ms: number, description: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${description}`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

// ---- journals ------------------------------------------------------------------------------------------

let observed = Date.parse('2026-03-01T00:00:00.000Z');

export function trade(
  entityId: string,
  market: string,
  price: string,
  size: string,
  extra: Partial<NewEvent> = {},
): NewEvent {
  observed += 1_000;
  return {
    kind: 'trade',
    entityId,
    revision: 1,
    observedAt: new Date(observed).toISOString(),
    data: { market, asset: `${market}-yes`, side: 'BUY', price, size, wallet: '0xwhale', txHash: `0x${entityId}` },
    ...extra,
  };
}

export function correction(entityId: string, market: string, revision: number, price: string, size: string): NewEvent {
  return { ...trade(entityId, market, price, size), kind: 'correction', revision };
}

/** A journal holding exactly these transitions at positions 1..n (no generated activity). */
export function journalOf(transitions: NewTransition[], seed = 7): Journal {
  const journal = Journal.generate({ seed, transitions: 0 });
  for (const transition of transitions) journal.append(transition);
  return journal;
}

export const ALL: StreamFilter = {};
