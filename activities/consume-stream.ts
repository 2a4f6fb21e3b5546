// The Temporal-agnostic core of the `consumeStream` activity: one run holds a bounded lease, plans its start from
// the committed state, and connects (stream-connection.ts) until a protocol stop, the lease's end or cancellation,
// reconnecting with backoff from the committed checkpoint. Each connection is a new session epoch.
// Protocol stops are returned as a ConsumeOutcome; transport trouble past the retry bound is thrown.
import { backoffDelay } from '../protocol/backoff.js';
import { filterHash } from '../protocol/canonical.js';
import type { StartRequest, StreamFilter } from '../protocol/codec.js';
import { progressReading, type ProgressReading } from '../protocol/progress.js';
import { Session } from '../protocol/session.js';
import { SessionFence } from '../protocol/session-fence.js';
import type { CheckpointPlan, CommittedState } from '../protocol/types.js';
import type { CommitResult } from '../db/commit-types.js';
import { RecentExecutionsBudget, type RecentExecutions } from '../db/recent-executions.js';
import { StaleLeaseAttempt } from '../db/errors.js';
import { stagingBudget, StreamConnection, type ConnectionEnd, type OutcomeStop } from './stream-connection.js';
import type { BudgetSeat } from '../protocol/shared-budget.js';
import { DatabaseBehind, StreamTransportError } from './stream-errors.js';
import type { ConsumeStreamContext, ConsumeStreamDeps } from './stream-ports.js';
import type {
  CheckpointSummary,
  CommittedTotals,
  ConsumeOutcome,
  ConsumeStreamInput,
  RunReport,
  StreamCounters,
  StreamHeartbeat,
} from './types.js';
import { emptyCounters } from './types.js';

/** What a failed run had done, attached to the error it threw (the activity passes it to the workflow). */
const failedRuns = new WeakMap<Error, RunReport & { committed: CheckpointSummary }>();

/** The report of the run that threw `error`; null for an error thrown before the run began (or not by a run). */
export function runReportOf(error: unknown): (RunReport & { committed: CheckpointSummary }) | null {
  return error instanceof Error ? (failedRuns.get(error) ?? null) : null;
}

interface StartPlan {
  request: StartRequest;
  filter: StreamFilter;
  /** rebind and explicit starts return `rebound` after the first commit of the new binding */
  returnsRebound: boolean;
}

export async function consumeStream(
  deps: ConsumeStreamDeps,
  input: ConsumeStreamInput,
  ctx: ConsumeStreamContext,
): Promise<ConsumeOutcome> {
  const { expected } = input;
  // The workflow holds a committed copy: a database without this consumer is behind (restored, or another
  // database), and nothing may be written for it.
  const existingOnly = expected !== null && (expected.version > 0 || expected.token !== null);
  const stopWaiting = heartbeatWhileWaiting(deps, input, ctx);
  const state = await deps.store
    .acquireLease(input.consumerId, { existingOnly, ...(ctx.attempt ? { attempt: ctx.attempt } : {}) })
    .catch((error: unknown) => {
      if (error instanceof StaleLeaseAttempt) {
        deps.log.warn('lease refused: a later attempt of this run has taken over', {
          consumerId: input.consumerId,
          attempt: error.attempt,
          holderAttempt: error.holderAttempt,
        });
      }
      throw error;
    })
    .finally(stopWaiting);
  if (state === null || (expected !== null && state.version < expected.version)) {
    throw new DatabaseBehind(input.consumerId, state?.version ?? null, expected?.version ?? 0);
  }
  deps.metrics?.leaseStarted(input.consumerId, state.position, state.version);
  if (ctx.takeover) {
    deps.log.warn('lease taken over from an attempt that stopped heartbeating', {
      consumerId: input.consumerId,
      attempt: ctx.takeover.attempt,
      position: state.position,
      leaseEpoch: state.leaseEpoch,
    });
  }
  deps.log.info('lease started', {
    consumerId: input.consumerId,
    leaseMs: input.leaseMs,
    start: input.start.mode,
    position: state.position,
    leaseEpoch: state.leaseEpoch,
    ...(ctx.attempt ? { attempt: ctx.attempt.number } : {}),
  });
  return new StreamRun(deps, input, ctx, state).run();
}

/**
 * An attempt waiting for its lease (a free connection of a pool its worker's other runs keep busy, or the lock of a
 * predecessor still inside a commit) is alive, and heartbeats so: one that waited past the heartbeat timeout
 * silently was timed out and retried, and on a loaded worker the retry waited the same way, a chain of takeovers
 * each sending again what was not yet committed. It heartbeats what it inherited (the workflow's committed copy and
 * the counters of the attempt it retries), so a takeover of it still goes on from those. Returns the stop.
 */
function heartbeatWhileWaiting(
  deps: ConsumeStreamDeps,
  input: ConsumeStreamInput,
  ctx: ConsumeStreamContext,
): () => void {
  const committed = {
    position: input.expected?.position ?? null,
    version: input.expected?.version ?? 0,
    generation: input.expected?.generation ?? null,
  };
  const counters = ctx.takeover?.counters ?? emptyCounters();
  const heartbeat = (): void => ctx.heartbeat(streamHeartbeat(committed, { counters }).details);
  heartbeat();
  const timer = setInterval(heartbeat, deps.config.heartbeatEveryMs);
  return () => clearInterval(timer);
}

/** A heartbeat's details: the committed checkpoint a run stands at and its report of itself; and their reading. */
function streamHeartbeat(
  committed: Pick<CheckpointSummary, 'position' | 'version' | 'generation'>,
  report: Pick<RunReport, 'counters'> & Partial<RunReport>,
): { details: StreamHeartbeat; reading: ProgressReading } {
  const { position, version, generation } = committed;
  const reading = progressReading(position, report.counters.lastHeadPosition, Date.now());
  return { details: { position, version, generation, headPosition: reading.head, at: reading.at, ...report }, reading };
}

class StreamRun {
  readonly #fence = new SessionFence();
  readonly #counters: StreamCounters;
  /** What this run's commits wrote and read: its corrections of them commit in one statement. */
  readonly #recentExecutions: { recent: RecentExecutions; close(): void };
  /** Its share of the events its process's runs may keep waiting to commit. */
  readonly #staging: BudgetSeat;
  #state: CommittedState;
  #leaseExpired = false;
  #committedThisRun = false;
  /** The connection of this run, ended gracefully when the lease is over or the activity is cancelled. */
  #current: StreamConnection | null = null;

  constructor(
    private readonly deps: ConsumeStreamDeps,
    private readonly input: ConsumeStreamInput,
    private readonly ctx: ConsumeStreamContext,
    state: CommittedState,
  ) {
    this.#state = state;
    // Without the worker's budgets, budgets of its own: the run alone, at the full capacity.
    this.#recentExecutions = (deps.recentExecutions ?? new RecentExecutionsBudget()).open();
    this.#staging = (deps.staging ?? stagingBudget(deps.config.staging.maxEvents)).open();
    // A retried attempt goes on from the counters its predecessor last heartbeated: its work stays in the totals.
    this.#counters = { ...(ctx.takeover?.counters ?? emptyCounters()) };
  }

  async run(): Promise<ConsumeOutcome> {
    try {
      return await this.#run();
    } catch (error) {
      // Whatever ends the run (a fault, a fence, storage), its counters go with it: none of its work is dropped.
      if (error instanceof Error)
        failedRuns.set(error, { ...this.#report(), committed: checkpointSummary(this.#state) });
      throw error;
    } finally {
      this.#recentExecutions.close();
      this.#staging.close();
    }
  }

  async #run(): Promise<ConsumeOutcome> {
    const start = this.#planStart();
    if ('failed' in start) return this.#outcome({ kind: 'failed', code: 'config', message: start.failed });

    const { reconnect } = this.deps.config;
    const stopNow = () => this.#current?.finish();
    const leaseTimer = setTimeout(() => {
      this.#leaseExpired = true;
      stopNow();
    }, this.input.leaseMs);
    const heartbeatTimer = setInterval(() => this.#heartbeat(), this.deps.config.heartbeatEveryMs);
    this.ctx.signal.addEventListener('abort', stopNow);
    try {
      let failures = 0;
      for (;;) {
        if (this.ctx.signal.aborted) return this.#outcome({ kind: 'cancelled' });
        if (this.#leaseExpired) return this.#outcome({ kind: 'lease_expired' });
        // After a commit in this run, reconnect from the newly committed token (and its saved binding).
        const end = await this.#connect(this.#committedThisRun ? this.#resumeStart() : start);
        if (end.kind === 'outcome') return end.outcome;
        if (end.kind === 'throw') throw this.#withCommitted(end.error);
        // The new binding committed, though the connection then ended another way (lease, drop): report it.
        if (this.#committedThisRun && start.returnsRebound)
          return this.#outcome({ kind: 'rebound', generation: this.#state.generation ?? 0 });
        if (end.kind === 'finished') continue;
        this.deps.metrics?.reconnected(this.input.consumerId, end.code);
        failures = end.progressed ? 1 : failures + 1;
        if (failures > reconnect.maxAttempts) {
          throw this.#withCommitted(
            new StreamTransportError(
              end.code,
              `stream failed ${failures} times in a row without progress at position ${this.#state.position ?? 'none'}; last: ${end.message}`,
            ),
          );
        }
        const delay = backoffDelay(reconnect, failures);
        this.deps.log.warn('stream session ended; reconnecting from the committed checkpoint', {
          code: end.code,
          attempt: failures,
          delayMs: delay,
          position: this.#state.position,
        });
        await abortableDelay(delay, this.ctx.signal);
      }
    } finally {
      clearTimeout(leaseTimer);
      clearInterval(heartbeatTimer);
      this.ctx.signal.removeEventListener('abort', stopNow);
    }
  }

  /** The start of this run: the database's recorded decision first, else the workflow's directive. */
  #planStart(): StartPlan | { failed: string } {
    const state = this.#state;
    const directive = this.input.start;
    const saved = state.binding;
    if (state.abandoned) return { failed: `consumer ${state.consumerId} was abandoned by an operator decision` };
    const hasCheckpoint = state.token !== null && saved !== null;
    if (state.pendingStart) {
      const filter = directive.mode === 'resume' ? saved?.filter : directive.filter;
      if (!filter)
        return {
          failed: `recorded start ${state.pendingStart} has no filter: no saved binding and the directive is resume`,
        };
      return { request: { mode: state.pendingStart }, filter, returnsRebound: true };
    }
    if (directive.mode === 'resume') {
      if (!hasCheckpoint)
        return {
          failed:
            'start is resume but the consumer has no saved checkpoint: the first start must be explicit (live_cut or from_floor)',
        };
      return this.#resumeStart();
    }
    // A retried attempt whose rebind/explicit start already committed finds that binding saved: resume it.
    if (hasCheckpoint && saved.filterHash === filterHash(directive.filter)) {
      return { ...this.#resumeStart(), returnsRebound: true };
    }
    if (directive.mode === 'rebind') {
      if (!hasCheckpoint) return { failed: 'rebind needs a saved checkpoint and binding' };
      return { request: { mode: 'rebind', token: state.token! }, filter: directive.filter, returnsRebound: true };
    }
    if (hasCheckpoint) {
      return {
        failed: `explicit start ${directive.mode} refused: the consumer has a saved checkpoint and no recorded decision`,
      };
    }
    return { request: { mode: directive.mode }, filter: directive.filter, returnsRebound: true };
  }

  /** Resume with the saved token and the saved binding's exact filter. */
  #resumeStart(): StartPlan {
    const { token, binding } = this.#state;
    if (token === null || binding === null) throw new Error('resume without a saved checkpoint');
    return { request: { mode: 'resume', token }, filter: binding.filter, returnsRebound: false };
  }

  /** Opens the next connection under a new session epoch; it ends with what the run does next. */
  #connect(start: StartPlan): Promise<ConnectionEnd> {
    const epoch = this.#fence.begin();
    this.#counters.sessions += 1;
    const session = this.#newSession(start);
    const connection = new StreamConnection(
      this.deps,
      {
        consumerId: this.input.consumerId,
        counters: this.#counters,
        recentExecutions: this.#recentExecutions.recent,
        waitingBound: this.#staging.share,
        signal: this.ctx.signal,
        committedState: () => this.#state,
        recordCommit: (plan, committed) => this.#recordCommit(plan, committed),
        heartbeat: () => this.#heartbeat(),
        outcome: (stop) => this.#outcome(stop),
      },
      { session, fence: this.#fence, epoch, returnsRebound: start.returnsRebound },
    );
    this.#current = connection;
    return connection.ended;
  }

  #newSession(start: StartPlan): Session {
    const { config } = this.deps;
    return new Session({
      consumerId: this.input.consumerId,
      subscriptionId: this.input.subscriptionId,
      filter: start.filter,
      start: start.request,
      saved: this.#state.binding,
      committedPosition: this.#state.position,
      fence: { leaseEpoch: this.#state.leaseEpoch, version: this.#state.version },
      quarantinePolicy: config.quarantinePolicy,
      actions: config.actions,
      staging: config.staging,
      now: () => Date.now(),
    });
  }

  #recordCommit(plan: CheckpointPlan, committed: CommitResult): void {
    this.#committedThisRun = true;
    const before = this.#state;
    this.#state = {
      ...this.#state,
      version: committed.version,
      position: plan.checkpoint.position,
      token: plan.checkpoint.token,
      generation: plan.checkpoint.generation,
      binding: plan.binding,
      cutPosition: plan.checkpoint.cutPosition,
      cutReached: plan.checkpoint.cutReached,
      pendingStart: null,
      // The row's totals move with the version, as the commit statement moves them (none for a commit that wrote
      // nothing): this run is the only writer while its lease holds.
      ...(before.totals && {
        totals: {
          checkpointsCommitted: before.totals.checkpointsCommitted + (committed.version - before.version),
          eventsApplied: before.totals.eventsApplied + (committed.version > before.version ? committed.applied : 0),
        },
      }),
    };
    const counters = this.#counters;
    counters.checkpointsCommitted += 1;
    counters.eventsApplied += committed.applied;
    counters.duplicates += committed.duplicates;
    counters.lastCommitAt = new Date().toISOString();
  }

  #heartbeat(): void {
    const report = this.#report();
    const { details, reading } = streamHeartbeat(this.#state, report);
    this.ctx.heartbeat(details);
    this.ctx.report?.(reading, report);
  }

  /** The run's counters so far and the database's totals after its last commit. */
  #report(): RunReport {
    const { leaseEpoch, version, totals } = this.#state;
    const committed: CommittedTotals | null = totals ? { version, ...totals } : null;
    return { leaseEpoch, counters: { ...this.#counters }, totals: committed };
  }

  /** A transport error carries the committed checkpoint, so the workflow can tell whether the run made progress. */
  #withCommitted(error: Error): Error {
    if (error instanceof StreamTransportError) error.committed = checkpointSummary(this.#state);
    return error;
  }

  #outcome(rest: OutcomeStop): ConsumeOutcome {
    return { ...rest, committed: checkpointSummary(this.#state), ...this.#report() };
  }
}

/** The workflow's copy of a committed state: the checkpoint and its binding's filter hash, nothing secret. */
export function checkpointSummary(state: CommittedState): CheckpointSummary {
  return {
    position: state.position,
    token: state.token,
    generation: state.generation,
    version: state.version,
    filterHash: state.binding?.filterHash ?? null,
  };
}

function abortableDelay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done);
  });
}
