// Reading a consumer from both sides: the workflow (describe, the `status` query, the streaming activity's
// last heartbeat) and the database (the committed checkpoint and its effects, the authority on progress).
import {
  Client,
  WorkflowNotFoundError,
  type Connection,
  type WorkflowExecutionDescription,
  type WorkflowHandle,
} from '@temporalio/client';
import { defaultPayloadConverter, type SearchAttributePair } from '@temporalio/common';
import { optionalTsToMs } from '@temporalio/common/lib/time.js';
import type pg from 'pg';
import { asRunReport, emptyCounters, type RunReport, type StreamHeartbeat } from '../activities/types.js';
import { consumerSummary, type ConsumerSummary } from '../db/summary.js';
import { isProgressReading, latestReading, RateWindow, type ProgressReading } from '../protocol/progress.js';
import { consumerTotals, furtherReport, RUNNING_PHASES, type ConsumerTotals } from '../workflows/consumer-state.js';
import { connectClient, TemporalConnectError } from '../worker/temporal-connection.js';
import {
  backfillWorkflowId,
  consumerIdSearchAttribute,
  consumerWorkflowId,
  kindSearchAttribute,
  phaseSearchAttribute,
  statusQuery,
  type BackfillPhase,
  type ConsumerPhase,
  type ConsumerStatus,
  type WorkflowKind,
} from '../workflows/definitions.js';
import type { CliConfig } from './config.js';
import { CliError } from './errors.js';
import { retentionView, type RetentionView } from './retention.js';
import { attemptHint, noAnswerHint, type Attempt, type Poller } from './worker-hint.js';

export const STREAM_ACTIVITY = 'consumeStream';
/** Queries and updates need a worker to answer; past this the CLI says so instead of hanging. */
export const ANSWER_TIMEOUT_MS = 15_000;

export interface TemporalSession {
  client: Client;
  connection: Connection;
  config: CliConfig;
  close(): Promise<void>;
}

export async function connectTemporal(config: CliConfig): Promise<TemporalSession> {
  let connection: Connection;
  try {
    connection = await connectClient(config.temporal, 5_000);
  } catch (error) {
    if (!(error instanceof TemporalConnectError)) throw error;
    throw new CliError('temporal_unavailable', error.message, { cause: error });
  }
  return {
    client: new Client({ connection, namespace: config.temporal.namespace }),
    connection,
    config,
    close: () => connection.close(),
  };
}

export interface ConsumerWorkflow {
  handle: WorkflowHandle;
  description: WorkflowExecutionDescription;
}

/**
 * The consumer's workflow: its stream consumer (`whalehunt-consumer:<id>`) or its backfill
 * (`whalehunt-backfill:<id>`), the running one first, else the latest started; so every operator command reaches
 * whichever runs. CliError unknown_consumer naming both workflow ids when neither exists.
 */
export async function findConsumer(session: TemporalSession, consumerId: string): Promise<ConsumerWorkflow> {
  const found: ConsumerWorkflow[] = [];
  for (const workflowId of [consumerWorkflowId(consumerId), backfillWorkflowId(consumerId)]) {
    const handle = session.client.workflow.getHandle(workflowId);
    try {
      found.push({ handle, description: await handle.describe() });
    } catch (error) {
      if (!(error instanceof WorkflowNotFoundError)) throw error;
    }
  }
  const running = found.find((w) => w.description.status.name === 'RUNNING');
  const latest = found.sort((a, b) => b.description.startTime.getTime() - a.description.startTime.getTime())[0];
  const workflow = running ?? latest;
  if (!workflow) {
    throw new CliError(
      'unknown_consumer',
      `unknown consumer "${consumerId}": no workflow ${consumerWorkflowId(consumerId)} or ${backfillWorkflowId(consumerId)} in namespace ${session.config.temporal.namespace}`,
    );
  }
  return workflow;
}

export interface WorkflowStart {
  workflowId: string;
  taskQueue: string;
  typedSearchAttributes: SearchAttributePair[];
}

const FIRST_PHASE: Record<WorkflowKind, ConsumerPhase | BackfillPhase> = {
  stream: 'streaming',
  backfill: 'backfilling',
};

/**
 * Where a consumer's workflow of `kind` starts: its id, the task queue, and what `list` and the UI find it by
 * (its consumer, its first phase, its kind).
 */
export function workflowStart(session: TemporalSession, kind: WorkflowKind, consumerId: string): WorkflowStart {
  return {
    workflowId: kind === 'stream' ? consumerWorkflowId(consumerId) : backfillWorkflowId(consumerId),
    taskQueue: session.config.taskQueue,
    typedSearchAttributes: [
      { key: consumerIdSearchAttribute, value: consumerId },
      { key: phaseSearchAttribute, value: FIRST_PHASE[kind] },
      { key: kindSearchAttribute, value: kind },
    ],
  };
}

/** True when the workflow is a backfill (its status and heartbeats have the backfill's shape). */
export function isBackfill(workflow: ConsumerWorkflow): boolean {
  return workflow.description.type === 'backfillWorkflow';
}

export function requireRunning(consumerId: string, workflow: ConsumerWorkflow): void {
  const status = workflow.description.status.name;
  if (status !== 'RUNNING') {
    throw new CliError(
      'not_running',
      `consumer "${consumerId}" is not running (its workflow ${workflow.handle.workflowId} is ${status})`,
    );
  }
}

/**
 * Runs a call that needs a worker's answer, bounded: a silent workflow becomes a clear error that says why (no
 * worker polls its task queue; the worker of its streaming attempt stopped heartbeating, named; busy workers). With
 * the workflow's handle the hint looks at its running attempt too.
 */
export async function withAnswerTimeout<T>(
  session: TemporalSession,
  what: string,
  fn: () => Promise<T>,
  timeoutMs = ANSWER_TIMEOUT_MS,
  handle?: WorkflowHandle,
): Promise<T> {
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    return await session.connection.withAbortSignal(signal, fn);
  } catch (error) {
    if (!signal.aborted) throw error;
    const [pollers, attempt] = await Promise.all([
      workflowPollers(session),
      handle
        ? handle.describe().then(
            (d) => pendingAttempt(d),
            () => null,
          )
        : null,
    ]);
    const why = noAnswerHint({ taskQueue: session.config.taskQueue, pollers, attempt, nowMs: Date.now() });
    throw new CliError('no_answer', `${what}: no answer within ${timeoutMs / 1000} s; ${why}`, { cause: error });
  }
}

/** temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW */
const WORKFLOW_TASK_QUEUE_TYPE = 1;

/** The workers Temporal lists as polling the task queue for workflow tasks; null when it cannot say. */
export async function workflowPollers(session: TemporalSession): Promise<Poller[] | null> {
  try {
    const { pollers } = await session.client.workflowService.describeTaskQueue({
      namespace: session.config.temporal.namespace,
      taskQueue: { name: session.config.taskQueue },
      taskQueueType: WORKFLOW_TASK_QUEUE_TYPE,
    });
    return (pollers ?? []).map((p) => ({
      identity: p.identity ?? '(unnamed)',
      lastAccessMs: optionalTsToMs(p.lastAccessTime) ?? null,
    }));
  } catch {
    return null;
  }
}

/** The activities that hold a consumer's lease: the streaming run and the backfill's page run. */
const LEASE_ACTIVITIES = [STREAM_ACTIVITY, 'consumePages'];

/** The pending streaming (or page) attempt of a workflow, as the hints read it; null when none runs. */
export function pendingAttempt(description: WorkflowExecutionDescription): Attempt | null {
  const pending = (description.raw.pendingActivities ?? []).find((a) =>
    LEASE_ACTIVITIES.includes(a.activityType?.name ?? ''),
  );
  if (!pending) return null;
  return {
    workerIdentity: pending.lastWorkerIdentity || null,
    startedMs: optionalTsToMs(pending.lastStartedTime) ?? null,
    scheduledMs: optionalTsToMs(pending.scheduledTime) ?? null,
    lastHeartbeatMs: optionalTsToMs(pending.lastHeartbeatTime) ?? null,
    heartbeatTimeoutMs: optionalTsToMs(pending.activityOptions?.heartbeatTimeout) ?? null,
  };
}

/** The streaming activity's last heartbeat (position, head, counters): fresher than the workflow's copy. */
export function streamHeartbeat(description: WorkflowExecutionDescription): StreamHeartbeat | null {
  for (const activity of description.raw.pendingActivities ?? []) {
    if (activity.activityType?.name !== STREAM_ACTIVITY) continue;
    const payload = activity.heartbeatDetails?.payloads?.[0];
    if (!payload) return null;
    const details = defaultPayloadConverter.fromPayload(payload);
    return isHeartbeat(details) ? details : null;
  }
  return null;
}

function isHeartbeat(value: unknown): value is StreamHeartbeat {
  return typeof value === 'object' && value !== null && 'counters' in value && 'version' in value;
}

export interface ConsumerReport {
  consumerId: string;
  workflow: { workflowId: string; runId: string; status: string; startTime: string } | null;
  /** null when the query went unanswered (no worker) or the workflow does not exist. */
  status: ConsumerStatus | null;
  statusError: string | null;
  heartbeat: StreamHeartbeat | null;
  /** The streaming attempt looks stuck (frozen or lost worker, or no worker takes it): why; null when it runs. */
  workerHint: string | null;
  /** null when DATABASE_URL is not set, or the consumer never took a lease. */
  database: ConsumerSummary | null;
  databaseError: string | null;
  /** The consumer tables' sizes and the last maintenance run; null when DATABASE_URL is not set or it failed. */
  retention: RetentionView | null;
}

/** Everything `status` shows. Unknown only when neither Temporal nor the database knows the consumer. */
export async function consumerReport(
  session: TemporalSession,
  pool: pg.Pool | null,
  consumerId: string,
): Promise<ConsumerReport> {
  let workflow: ConsumerWorkflow | null = null;
  try {
    workflow = await findConsumer(session, consumerId);
  } catch (error) {
    if (!(error instanceof CliError && error.code === 'unknown_consumer') || pool === null) throw error;
  }

  let database: ConsumerSummary | null = null;
  let databaseError: string | null = null;
  let retention: RetentionView | null = null;
  if (pool) {
    try {
      database = await consumerSummary(pool, consumerId);
    } catch (error) {
      databaseError = error instanceof Error ? error.message : String(error);
    }
    // Without migration 0006 (a worker not restarted since the upgrade) there is no maintenance_runs: the rest stands.
    if (databaseError === null) retention = await retentionView(pool).catch(() => null);
  }
  if (!workflow && !database) {
    throw new CliError(
      'unknown_consumer',
      `unknown consumer "${consumerId}": no workflow ${consumerWorkflowId(consumerId)} and no checkpoint in the database`,
    );
  }

  let status: ConsumerStatus | null = null;
  let statusError: string | null = null;
  if (workflow) {
    try {
      status = await withAnswerTimeout(
        session,
        'status query',
        () => workflow.handle.query(statusQuery),
        5_000,
        workflow.handle,
      );
    } catch (error) {
      statusError = error instanceof Error ? error.message : String(error);
    }
  }
  return {
    consumerId,
    workflow: workflow && {
      workflowId: workflow.handle.workflowId,
      runId: workflow.description.runId,
      status: workflow.description.status.name,
      startTime: workflow.description.startTime.toISOString(),
    },
    status,
    statusError,
    heartbeat: workflow ? streamHeartbeat(workflow.description) : null,
    workerHint: workflow ? attemptHint(pendingAttempt(workflow.description), Date.now()) : null,
    database,
    databaseError,
    retention,
  };
}

/**
 * The consumer's totals: the workflow's (every ended run) plus the running run's latest report (its heartbeat or
 * its last progress signal, whichever is further on), with checkpoints and events as the database counts them (read
 * now, when DATABASE_URL is set; else as the runs last reported them).
 */
export function totalCounters(report: ConsumerReport): ConsumerTotals | null {
  const { status, database } = report;
  const saved = database?.state.totals ? { version: database.state.version, ...database.state.totals } : null;
  const beat = report.heartbeat && asRunReport(report.heartbeat);
  if (!status) return beat || saved ? consumerTotals(NOTHING_ENDED, beat, saved) : null;
  return consumerTotals(status, runningReport(status, beat), saved);
}

const NOTHING_ENDED = { counters: emptyCounters(), live: null, database: null };

/**
 * The running run's latest report: the heartbeat read with the description, unless its run ended meanwhile (the
 * status, queried after it, counts it already), or the workflow's live report when that is of a later run or
 * further on.
 */
function runningReport(status: ConsumerStatus, beat: RunReport | null): RunReport | null {
  const live = status.live ?? null;
  const ended = status.endedEpoch ?? null;
  const current =
    beat !== null && !(beat.leaseEpoch !== null && ended !== null && beat.leaseEpoch <= ended) ? beat : null;
  if (current === null || live === null) return current ?? live;
  if (current.leaseEpoch !== live.leaseEpoch)
    return (live.leaseEpoch ?? 0) > (current.leaseEpoch ?? 0) ? live : current;
  return furtherReport(current, live);
}

export interface ConsumerProgress {
  /** The freshest reading: the running lease's heartbeat, else the workflow's last progress signal or lease end. */
  reading: ProgressReading | null;
  source: 'heartbeat' | 'workflow' | null;
  /** Positions per second over the last minute; 0 when the workflow is in no running phase. */
  rate: number | null;
}

/**
 * Progress as `status` and the main job's progress line both show it: the same reading and the same rate window
 * the workflow's Current Details uses, brought up to date by the heartbeat when a lease runs.
 */
export function consumerProgress(
  sources: Pick<ConsumerReport, 'heartbeat' | 'status'>,
  nowMs: number,
): ConsumerProgress {
  const { heartbeat, status } = sources;
  const beat: unknown = heartbeat && { position: heartbeat.position, head: heartbeat.headPosition, at: heartbeat.at };
  const fromHeartbeat = isProgressReading(beat) ? beat : null;
  const fromWorkflow = status?.progress ?? null;
  const reading = latestReading(fromWorkflow, fromHeartbeat);
  const window = new RateWindow(undefined, status?.progressSamples ?? []);
  window.addReading(fromHeartbeat);
  const running = status === null || RUNNING_PHASES.includes(status.phase);
  return {
    reading,
    source: reading === null ? null : reading === fromHeartbeat ? 'heartbeat' : 'workflow',
    rate: running ? window.rate(nowMs) : 0,
  };
}
