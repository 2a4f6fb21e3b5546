// The worker's activities: the streaming run and the paginated history run (the Temporal-agnostic
// consumeStream and consumePages wired to Context's heartbeat and cancellation) and the small database steps
// the workflows take: reading the committed checkpoint, recording decisions with their audit rows, and
// waiting for a rebind's generation.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type pg from 'pg';
import {
  acquireLease,
  commitCheckpoint,
  commitCheckpoints,
  recordRetentionFloor,
  RecentExecutionsBudget,
  loadCommitted,
  runMaintenance,
  recordBindingDecision,
  recordGapDecision,
  resolveQuarantine,
  summarizeOutbox,
  type DecisionInput,
  type MaintenanceProgress,
  type MaintenanceReport,
  type RetentionPolicy,
} from '../db/index.js';
import { commitOneAtATime } from './commit-run.js';
import { commitPageChunk, openPageProgress, recognisePageEvents, swapPageCursor } from '../db/pages.js';
import { handOverToStream, recordPageGapDecision, type Handover, type PageDecisionView } from '../db/page-decisions.js';
import type { StreamFilter } from '../protocol/codec.js';
import { redactSecret } from '../protocol/redact.js';
import type { CommittedState } from '../protocol/types.js';
import { checkpointSummary, consumeStream as runConsumeStream } from './consume-stream.js';
import { workflowProgressReporter } from './progress-reporter.js';
import { stagingBudget } from './stream-connection.js';
import type { ConsumeStreamConfig, ConsumeStreamDeps, ConsumeStreamLog } from './stream-ports.js';
import { finalFailures, guarded } from './to-failure.js';
import { FailureType } from './types-failures.js';
import {
  AWAITING_DECISION_REASONS,
  noMetrics,
  type AwaitingDecisionReason,
  type ConsumerMetrics,
  type DecisionKind,
} from './metrics.js';
import {
  consumePages as runConsumePages,
  type ConsumePagesInput,
  type PageConsumerConfig,
  type PageConsumerHooks,
  type PageHeartbeat,
  type PageOutcome,
  type PageStore,
} from './page-consumer.js';
import {
  heartbeatCounters,
  type BindingDecision,
  type CheckpointSummary,
  type ConsumeOutcome,
  type ConsumeStreamInput,
  type GapDecision,
  type QuarantineDecision,
} from './types.js';

/** The settings the activities need; the worker's configuration provides them. */
export interface ActivitiesConfig {
  /** Everything the streaming run needs, the API key included. */
  stream: ConsumeStreamConfig;
  /** The paginated history source (docs/protocol.md §8): events asked per page, events per durable chunk. */
  pages: { stream: string; limit: number; chunkSize: number };
  /** What a maintenance run removes (OUTBOX_RETENTION_DAYS, REVISION_RETENTION_DAYS) and how it bounds itself. */
  retention: RetentionPolicy;
}

export interface ActivityDeps {
  pool: pg.Pool;
  config: ActivitiesConfig;
  log: ConsumeStreamLog;
  /** Where the activities report commits, reconnects and decisions (default: nowhere). */
  metrics?: ConsumerMetrics;
  /** Test cut points inside the streaming run (kill -9 between stage, commit and ACK). */
  hooks?: ConsumeStreamDeps['hooks'];
  /** Test cut points inside the page run (kill -9 around a chunk's commit and the cursor swap). */
  pageHooks?: PageConsumerHooks;
  /** Where the streaming run takes its lease and commits; default: the db functions on `pool`. */
  store?: ConsumeStreamDeps['store'];
}

/** The streaming run's store: lease and commit on the pool. */
export function poolStore(pool: pg.Pool, hooks?: ConsumeStreamDeps['hooks']): ConsumeStreamDeps['store'] {
  return {
    acquireLease: (consumerId, options) => acquireLease(pool, consumerId, options),
    recordFloor: (consumerId, history) => recordRetentionFloor(pool, consumerId, history),
    commitCheckpoints: (plans, recent) => {
      // The cut point runs inside each checkpoint's own transaction.
      if (hooks?.insideCommit === undefined) return commitCheckpoints(pool, plans, recent);
      return commitOneAtATime(
        (plan) => commitCheckpoint(pool, plan, () => hooks.insideCommit?.(plan.checkpoint.position)),
        plans,
      );
    },
  };
}

/** The page consumer's store: progress, chunks and cursor swaps on the pool. */
export function poolPageStore(pool: pg.Pool): PageStore {
  return {
    openPageProgress: (binding) => openPageProgress(pool, binding),
    recognisePageEvents: (consumerId, events) => recognisePageEvents(pool, consumerId, events),
    commitPageChunk: (chunk) => commitPageChunk(pool, chunk),
    swapPageCursor: (swap) => swapPageCursor(pool, swap),
    recordFloor: (consumerId, history) => recordRetentionFloor(pool, consumerId, history),
  };
}

/** The committed checkpoint as the workflows see it: no secrets, no mappings, small. */
export interface CommittedView {
  summary: CheckpointSummary;
  filter: StreamFilter | null;
  pendingStart: 'live_cut' | 'from_floor' | null;
  abandoned: boolean;
}

export interface WaitForGenerationInput {
  consumerId: string;
  generation: number;
  timeoutMs: number;
  pollMs?: number;
}

export interface WaitForDatabaseInput {
  /** Ask no earlier than this (a database that answers at once is not waited on in a loop). */
  minWaitMs: number;
  /** Give up after this long: the workflow asks again, so one activity never runs for a whole outage. */
  maxWaitMs: number;
  /** How often to ask while it does not answer. */
  pollMs: number;
}

/**
 * A probe's bound: a connection that hangs (a lost network rather than a refusing server) is no answer. Below the
 * default heartbeat timeout, which the wait's heartbeats must not miss.
 */
const DATABASE_PROBE_TIMEOUT_MS = 1_500;

export interface ConsumePagesActivityInput extends ConsumePagesInput {
  /**
   * The stream whose history is paged (part of the page path; a page consumer stays bound to it); PAGE_STREAM when
   * omitted.
   */
  stream?: string;
}

/** The paginated source lives on the stream server's origin: ws → http, wss → https. */
export function pageSourceUrl(streamUrl: string): string {
  const url = new URL(streamUrl);
  return `${url.protocol === 'wss:' ? 'https:' : 'http:'}//${url.host}`;
}

/**
 * The page consumer's configuration, for the consumePages activity and the `backfill` command alike: the source
 * on the stream server's origin with the stream's API key, backoff, quarantine policy and actions, and the
 * PAGE_LIMIT / PAGE_CHUNK_SIZE settings. `stream` is the paged stream (default PAGE_STREAM).
 */
export function pageConsumerConfig(config: ActivitiesConfig, stream = config.pages.stream): PageConsumerConfig {
  const { url, apiKey, reconnect, quarantinePolicy, actions } = config.stream;
  return {
    url: pageSourceUrl(url),
    apiKey,
    stream,
    limit: config.pages.limit,
    chunkSize: config.pages.chunkSize,
    backoff: reconnect,
    quarantinePolicy,
    actions,
  };
}

export function committedView(state: CommittedState | null): CommittedView {
  if (!state) {
    return {
      summary: { position: null, token: null, generation: null, version: 0, filterHash: null },
      filter: null,
      pendingStart: null,
      abandoned: false,
    };
  }
  return {
    summary: checkpointSummary(state),
    filter: state.binding?.filter ?? null,
    pendingStart: state.pendingStart,
    abandoned: state.abandoned,
  };
}

export function createActivities(deps: ActivityDeps) {
  const { pool, log } = deps;
  const metrics = deps.metrics ?? noMetrics;
  const apiKey = deps.config.stream.apiKey;
  const streamDeps: ConsumeStreamDeps = {
    store: deps.store ?? poolStore(pool, deps.hooks),
    config: deps.config.stream,
    log,
    metrics,
    recentExecutions: new RecentExecutionsBudget(),
    staging: stagingBudget(deps.config.stream.staging.maxEvents),
    ...(deps.hooks ? { hooks: deps.hooks } : {}),
  };
  const pageStore = poolPageStore(pool);
  const guard = <T>(run: () => Promise<T>): Promise<T> => guarded(run, apiKey);
  const viewOf = (read: () => Promise<CommittedState | null>): Promise<CommittedView> =>
    guard(async () => committedView(await read()));
  const decided = decisionRecorder(metrics, log);

  return {
    /**
     * One bounded streaming lease. Heartbeats carry small progress details; cancellation stops at a checkpoint
     * boundary.
     */
    async consumeStream(input: ConsumeStreamInput): Promise<ConsumeOutcome> {
      const ctx = Context.current();
      const { attempt } = ctx.info;
      const outcome = await finalFailures(
        () =>
          runConsumeStream(streamDeps, input, {
            heartbeat: (details) => ctx.heartbeat(details),
            // The alert figures ride on the progress signal: one outbox summary per signal sent (at most every 20 s).
            report: workflowProgressReporter(log, () => summarizeOutbox(pool, input.consumerId)),
            signal: ctx.cancellationSignal,
            attempt: { activity: `${ctx.info.workflowExecution?.runId ?? ''}/${ctx.info.activityId}`, number: attempt },
            ...(attempt > 1 ? { takeover: { attempt, counters: heartbeatCounters(ctx.info.heartbeatDetails) } } : {}),
          }),
        apiKey,
      );
      log.info('lease ended', {
        consumerId: input.consumerId,
        outcome: outcome.kind,
        position: outcome.committed.position,
        checkpointsCommitted: outcome.counters.checkpointsCommitted,
      });
      if (isAwaitingDecision(outcome.kind)) metrics.awaitingDecision(input.consumerId, outcome.kind);
      return outcome;
    },

    /** Pages the history source from the consumer's saved cursor (docs/protocol.md §8); see consumePagesRun. */
    async consumePages(input: ConsumePagesActivityInput): Promise<PageOutcome> {
      return consumePagesRun(deps, pageStore, input);
    },

    async loadCommitted(input: { consumerId: string }): Promise<CommittedView> {
      return viewOf(() => loadCommitted(pool, input.consumerId));
    },

    async recordGapDecision(input: DecisionInput<GapDecision>): Promise<CommittedView> {
      const view = await viewOf(() => recordGapDecision(pool, input));
      decided('gap', input);
      return view;
    },

    async recordBindingDecision(input: DecisionInput<BindingDecision>): Promise<CommittedView> {
      const view = await viewOf(() => recordBindingDecision(pool, input));
      decided('binding', input);
      return view;
    },

    /** A backfill's gap decision (from_floor or abandon), with its audit row. */
    async recordPageGapDecision(input: DecisionInput<GapDecision>): Promise<PageDecisionView> {
      return guard(() => recordPageGapDecision(pool, input));
    },

    /** A backfill's consumer id, at its target, becomes a stream consumer starting from the floor. */
    async handOverToStream(input: { consumerId: string; expectedVersion: number }): Promise<Handover> {
      const hooks = deps.pageHooks;
      const inside = hooks?.insideHandover
        ? (progress: { appliedPosition: number }) => hooks.insideHandover?.(progress)
        : undefined;
      const handover = await guard(() => handOverToStream(pool, input, inside));
      log.info('backfill handover', { consumerId: input.consumerId, ...handover });
      return handover;
    },

    /** Decides held quarantine; deciding nothing (no held record matched) is refused so the operator sees it. */
    async resolveQuarantine(
      input: DecisionInput<QuarantineDecision> & { eventIds?: string[] },
    ): Promise<{ resolved: number }> {
      return guard(async () => {
        const resolved = await resolveQuarantine(pool, input);
        if (resolved === 0) {
          throw ApplicationFailure.create({
            type: FailureType.InvalidDecision,
            message: `no held quarantine record of consumer ${input.consumerId} matched${input.eventIds ? ` events ${input.eventIds.join(', ')}` : ''}`,
            nonRetryable: true,
          });
        }
        decided('quarantine', input, { resolved });
        return { resolved };
      });
    },

    /** Waits for the database after a streaming run lost it; see waitForDatabase. */
    async waitForDatabase(input: WaitForDatabaseInput): Promise<{ answered: boolean; waitedMs: number }> {
      return waitForDatabase(pool, input);
    },

    /** One maintenance run with the worker's retention policy; see maintenanceRun. */
    async runMaintenance(): Promise<MaintenanceReport> {
      return maintenanceRun(deps, metrics);
    },

    /** Polls the committed checkpoint until it reaches `generation` (a rebind's first commit), within a bound. */
    async waitForGeneration(input: WaitForGenerationInput): Promise<CommittedView> {
      return waitForGeneration(input, () => viewOf(() => loadCommitted(pool, input.consumerId)));
    },
  };
}

/** Logs and counts a recorded operator decision. */
function decisionRecorder(metrics: ConsumerMetrics, log: ConsumeStreamLog) {
  return (
    kind: DecisionKind,
    input: DecisionInput<GapDecision | BindingDecision | QuarantineDecision>,
    fields: Record<string, unknown> = {},
  ): void => {
    metrics.decisionRecorded(input.consumerId, kind, input.decision);
    const { consumerId, decision, actor, reason } = input;
    log.info('decision recorded', { consumerId, kind, decision, actor, reason, ...fields });
  };
}

/**
 * The consumePages activity: pages the history source from the consumer's saved cursor. Heartbeats its progress
 * at least every heartbeatEveryMs (so a cancellation reaches it during a long backoff too); cancellation stops
 * at a chunk boundary. Protocol stops are returned; a source still failing after the bounded backoff is
 * thrown as a retryable PageSourceUnavailable (Temporal retries from the saved cursor).
 */
async function consumePagesRun(
  deps: ActivityDeps,
  store: PageStore,
  input: ConsumePagesActivityInput,
): Promise<PageOutcome> {
  const ctx = Context.current();
  const { apiKey } = deps.config.stream;
  const { stream, ...asked } = input;
  // A retried attempt keeps the target the failed one fixed at its first page (its last heartbeat carries it).
  const previous = ctx.info.heartbeatDetails as Partial<PageHeartbeat> | undefined;
  const pagesInput: ConsumePagesInput =
    asked.target === 'head' && previous?.target ? { ...asked, target: previous.target } : asked;
  const config = pageConsumerConfig(deps.config, stream);
  // Until this attempt's first page, its heartbeats repeat the failed one's (a second crash keeps the target).
  let last: PageHeartbeat | undefined = previous?.target ? (previous as PageHeartbeat) : undefined;
  const heartbeat = (details?: PageHeartbeat): void => {
    if (details) last = details;
    ctx.heartbeat(last);
  };
  const timer = setInterval(() => heartbeat(), deps.config.stream.heartbeatEveryMs);
  try {
    return await guarded(async () => {
      const pageDeps = { store, config, log: deps.log, ...(deps.pageHooks ? { hooks: deps.pageHooks } : {}) };
      const outcome = await runConsumePages(pageDeps, pagesInput, { heartbeat, signal: ctx.cancellationSignal });
      if (outcome.kind === 'source_failed' && outcome.retryable) {
        throw ApplicationFailure.create({
          type: FailureType.PageSourceUnavailable,
          message: redactSecret(
            `page source ${outcome.code}${outcome.status === null ? '' : ` (HTTP ${outcome.status})`}: ${outcome.message}`,
            apiKey,
          ),
          details: [{ code: outcome.code, progress: outcome.progress }],
        });
      }
      return outcome;
    }, apiKey);
  } finally {
    clearInterval(timer);
  }
}

/**
 * The runMaintenance activity: db runMaintenance with the worker's policy, heartbeating its progress after every
 * removal statement and on a timer (a long statement still heartbeats), so a lost worker is noticed and a
 * cancellation stops it between statements. A retry simply runs again: a run removes only what is still there.
 * The removed rows are counted as they go (whalehunt_maintenance_rows_removed_total).
 */
async function maintenanceRun(deps: ActivityDeps, metrics: ConsumerMetrics): Promise<MaintenanceReport> {
  const ctx = Context.current();
  let last: MaintenanceProgress | null = null;
  const heartbeat = (): void => ctx.heartbeat(last);
  // Counted as removed, statement by statement: a run that fails later has still removed them.
  const counted = { receiptsDeleted: 0, outboxDeleted: 0, revisionsDeleted: 0 };
  const count = ({ receiptsDeleted, outboxDeleted, revisionsDeleted }: typeof counted): void => {
    metrics.rowsRemoved({
      receiptsDeleted: receiptsDeleted - counted.receiptsDeleted,
      outboxDeleted: outboxDeleted - counted.outboxDeleted,
      revisionsDeleted: revisionsDeleted - counted.revisionsDeleted,
    });
    Object.assign(counted, { receiptsDeleted, outboxDeleted, revisionsDeleted });
  };
  count(counted);
  const timer = setInterval(heartbeat, deps.config.stream.heartbeatEveryMs);
  heartbeat();
  try {
    const report = await guarded(
      () =>
        runMaintenance(deps.pool, deps.config.retention, {
          onProgress: (progress) => {
            last = progress;
            count(progress);
            heartbeat();
          },
          signal: ctx.cancellationSignal,
        }),
      deps.config.stream.apiKey,
    );
    deps.log.info('maintenance run', {
      runId: report.runId,
      receiptsDeleted: report.receiptsDeleted,
      outboxDeleted: report.outboxDeleted,
      revisionsDeleted: report.revisionsDeleted,
      consumers: report.consumers.length,
    });
    return report;
  } finally {
    clearInterval(timer);
  }
}

/**
 * The waitForDatabase activity: `SELECT 1` every `pollMs` from `minWaitMs` on, until the database answers (the next
 * run can commit at once) or `maxWaitMs` passed. Heartbeats every try, so a worker lost meanwhile is noticed; a
 * cancellation (pause, rebind) ends the wait.
 */
async function waitForDatabase(
  pool: pg.Pool,
  input: WaitForDatabaseInput,
): Promise<{ answered: boolean; waitedMs: number }> {
  const ctx = Context.current();
  const started = Date.now();
  ctx.heartbeat({ attempt: 0, waitedMs: 0 });
  await ctx.sleep(input.minWaitMs);
  // A heartbeat before each question and each pause: neither outlasts the (short) heartbeat timeout.
  for (let attempt = 1; ; attempt++) {
    ctx.heartbeat({ attempt, waitedMs: Date.now() - started });
    const answered = await databaseAnswers(pool, DATABASE_PROBE_TIMEOUT_MS);
    const waitedMs = Date.now() - started;
    if (answered || waitedMs >= input.maxWaitMs) return { answered, waitedMs };
    ctx.heartbeat({ attempt, waitedMs });
    await ctx.sleep(Math.min(input.pollMs, input.maxWaitMs - waitedMs));
  }
}

/** The waitForGeneration activity: `load` (the committed view) every pollMs until its generation is reached. */
async function waitForGeneration(
  input: WaitForGenerationInput,
  load: () => Promise<CommittedView>,
): Promise<CommittedView> {
  const ctx = Context.current();
  const pollMs = input.pollMs ?? 500;
  const deadline = Date.now() + input.timeoutMs;
  for (;;) {
    const view = await load();
    ctx.heartbeat({ generation: view.summary.generation, position: view.summary.position });
    if ((view.summary.generation ?? 0) >= input.generation) return view;
    if (Date.now() >= deadline) {
      throw ApplicationFailure.create({
        type: FailureType.GenerationNotReached,
        message: `consumer ${input.consumerId} did not commit generation ${input.generation} within ${input.timeoutMs} ms (still at ${view.summary.generation ?? 'none'})`,
        nonRetryable: true,
      });
    }
    await ctx.sleep(pollMs); // rejects with CancelledFailure when the workflow cancels the wait
  }
}

/** True when the database answers a trivial query within `timeoutMs`. */
async function databaseAnswers(pool: pg.Pool, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  const asked = pool.query('SELECT 1').then(
    () => true,
    () => false,
  );
  try {
    return await Promise.race([asked, late]);
  } finally {
    clearTimeout(timer);
  }
}

function isAwaitingDecision(kind: ConsumeOutcome['kind']): kind is AwaitingDecisionReason {
  return (AWAITING_DECISION_REASONS as readonly string[]).includes(kind);
}

export type Activities = ReturnType<typeof createActivities>;
