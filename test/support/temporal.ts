// Helpers for e2e tests against the run's Temporal dev server (started by temporal-global-setup.ts):
// clients, in-process workers that always shut down, unique task queues and bounded condition waits.
import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import type { WorkflowHandle } from '@temporalio/client';
import type { QueryDefinition } from '@temporalio/common';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { WorkerOptions } from '@temporalio/worker';
import { inject } from 'vitest';
import { waitFor, type WaitOptions } from './wait.js';
import { leaseTaskQueue } from '../../workflows/definitions.js';

export interface TemporalTarget {
  address: string;
  namespace: string;
}

export { waitFor, WaitTimeoutError, type WaitOptions } from './wait.js';

export function temporalTarget(): TemporalTarget {
  return { address: inject('temporalAddress'), namespace: inject('temporalNamespace') };
}

/** Path of the run's bundle of workflows/index.ts; throws with the reason when there is none. */
export function sharedWorkflowBundlePath(): string {
  const path = inject('workflowBundlePath');
  if (path === null) throw new Error(`no shared workflow bundle: ${inject('workflowBundleError') ?? 'unknown reason'}`);
  return path;
}

export interface TestClient {
  client: Client;
  connection: Connection;
  close(): Promise<void>;
}

/** A connected Client; close it at the end (e.g. `res.track(await createTestClient())`). */
export async function createTestClient(): Promise<TestClient> {
  const { address, namespace } = temporalTarget();
  const connection = await Connection.connect({ address });
  return { client: new Client({ connection, namespace }), connection, close: () => connection.close() };
}

/** A task queue no other test (or earlier run against a persistent server) polls. */
export function uniqueTaskQueue(prefix = 'test'): string {
  return `${prefix}-${randomUUID()}`;
}

export type TestWorkerOptions = Omit<WorkerOptions, 'connection' | 'namespace' | 'taskQueue'> & { taskQueue?: string };

/**
 * Runs an in-process Worker for the duration of `fn` and always shuts it down (and its connection), also
 * when `fn` throws. Workflows come from the run's shared bundle unless the options name their own
 * (`workflowsPath` or `workflowBundle`). The worker's task queue is unique unless given.
 */
export async function withWorker<R>(
  options: TestWorkerOptions,
  fn: (context: { worker: Worker; taskQueue: string }) => Promise<R>,
): Promise<R> {
  const { address, namespace } = temporalTarget();
  const taskQueue = options.taskQueue ?? uniqueTaskQueue();
  const ownWorkflows = options.workflowsPath !== undefined || options.workflowBundle !== undefined;
  const connection = await NativeConnection.connect({ address });
  try {
    const worker = await Worker.create({
      ...options,
      ...(ownWorkflows ? {} : { workflowBundle: { codePath: sharedWorkflowBundlePath() } }),
      connection,
      namespace,
      taskQueue,
    });
    // The consumer workflow runs its streaming leases on the lease queue: the same activities serve it.
    const leaseWorker = options.activities
      ? await Worker.create({
          activities: options.activities,
          connection,
          namespace,
          taskQueue: leaseTaskQueue(taskQueue),
        })
      : null;
    // runUntil shuts a worker down once fn settles and waits for it to drain.
    if (!leaseWorker) return await worker.runUntil(() => fn({ worker, taskQueue }));
    return await leaseWorker.runUntil(() => worker.runUntil(() => fn({ worker, taskQueue })));
  } finally {
    await connection.close();
  }
}

/** Waits until a workflow query's answer satisfies `predicate`; returns that answer. */
export function waitForQuery<T, Args extends unknown[]>(
  handle: WorkflowHandle,
  query: QueryDefinition<T, Args>,
  predicate: (answer: T) => boolean,
  options: Partial<WaitOptions> & { args?: Args } = {},
): Promise<T> {
  const args = (options.args ?? []) as Args;
  return waitFor(
    async () => {
      const answer = await handle.query(query, ...args);
      return predicate(answer) ? { answer } : undefined;
    },
    { description: `query ${query.name} on ${handle.workflowId} to match`, ...options },
  ).then(({ answer }) => answer);
}

/** Waits until a visibility query (e.g. `WhalehuntPhase = "paused"`) lists exactly `count` workflows. */
export async function waitForVisibility(
  client: Client,
  query: string,
  count: number,
  options: Partial<WaitOptions> = {},
): Promise<void> {
  await waitFor(
    async () => {
      const { count: listed } = await client.workflow.count(query);
      return listed === count;
    },
    { description: `visibility query \`${query}\` to count ${count}`, ...options },
  );
}
