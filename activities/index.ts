// The worker's activities: the streaming run (the Temporal-agnostic consumeStream wired to Context's
// heartbeat and cancellation) and the small database steps the workflows take: reading the committed
// checkpoint, recording decisions with their audit rows, and waiting for a rebind's generation.
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import type pg from 'pg';
import {
  acquireLease,
  commitCheckpoint,
  loadCommitted,
  recordBindingDecision,
  recordGapDecision,
  resolveQuarantine,
  StorageFailure,
  UnknownConsumer,
  type DecisionInput,
} from '../db/index.js';
import type { StreamFilter } from '../protocol/codec.js';
import type { CommittedState } from '../protocol/types.js';
import type { WorkerConfig } from '../worker/config.js';
import {
  consumeStream as runConsumeStream,
  DatabaseBehind,
  LeaseLost,
  StreamTransportError,
  type ConsumeStreamDeps,
  type ConsumeStreamLog,
} from './consume-stream.js';
import type {
  BindingDecision,
  CheckpointSummary,
  ConsumeOutcome,
  ConsumeStreamInput,
  GapDecision,
  QuarantineDecision,
} from './types.js';

export interface ActivityDeps {
  pool: pg.Pool;
  config: Pick<WorkerConfig, 'stream'>;
  log: ConsumeStreamLog;
  /** Test cut points inside the streaming run (kill -9 between stage, commit and ACK). */
  hooks?: ConsumeStreamDeps['hooks'];
  /** Where the streaming run takes its lease and commits; default: the db functions on `pool`. */
  store?: ConsumeStreamDeps['store'];
}

/** The streaming run's store: lease and commit on the pool. */
export function poolStore(pool: pg.Pool): ConsumeStreamDeps['store'] {
  return {
    acquireLease: (consumerId) => acquireLease(pool, consumerId),
    commitCheckpoint: (plan) => commitCheckpoint(pool, plan),
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

export function committedView(state: CommittedState | null): CommittedView {
  if (!state) {
    return { summary: { position: null, token: null, generation: null, version: 0, filterHash: null }, filter: null, pendingStart: null, abandoned: false };
  }
  return {
    summary: {
      position: state.position,
      token: state.token,
      generation: state.generation,
      version: state.version,
      filterHash: state.binding?.filterHash ?? null,
    },
    filter: state.binding?.filter ?? null,
    pendingStart: state.pendingStart,
    abandoned: state.abandoned,
  };
}

export function createActivities(deps: ActivityDeps) {
  const { pool, log } = deps;
  const apiKey = deps.config.stream.apiKey;
  const streamDeps: ConsumeStreamDeps = {
    store: deps.store ?? poolStore(pool),
    config: deps.config.stream,
    log,
    ...(deps.hooks ? { hooks: deps.hooks } : {}),
  };

  /** Belt and braces: no failure message that reaches workflow history may carry the API key. */
  const scrub = (text: string): string => (apiKey.length > 0 ? text.split(apiKey).join('[REDACTED]') : text);

  /** Turns the core's typed errors into Temporal failures the workflow's retry policy understands. */
  function toFailure(error: unknown): unknown {
    if (error instanceof CancelledFailure || !(error instanceof Error)) return error;
    if (error instanceof StreamTransportError) {
      return ApplicationFailure.create({
        type: 'StreamTransportError',
        message: scrub(`${error.code}: ${error.message}`),
        details: [{ code: error.code }],
        ...(error.retryAfterMs !== undefined ? { nextRetryDelay: error.retryAfterMs } : {}),
      });
    }
    if (error instanceof LeaseLost || error instanceof DatabaseBehind) {
      return ApplicationFailure.create({ type: error.name, message: scrub(error.message), nonRetryable: true, details: [{ code: error.code }] });
    }
    if (error instanceof UnknownConsumer) {
      return ApplicationFailure.create({ type: 'InvalidDecision', message: error.message, nonRetryable: true });
    }
    if (error instanceof StorageFailure) {
      return ApplicationFailure.create({ type: 'StorageFailure', message: scrub(error.message), nonRetryable: !error.retryable });
    }
    if (error.name === 'AbortError') return error;
    return ApplicationFailure.create({ type: error.name, message: scrub(error.message) });
  }

  async function guarded<T>(run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      throw toFailure(error);
    }
  }

  return {
    /** One bounded streaming lease. Heartbeats carry small progress details; cancellation stops at a checkpoint boundary. */
    async consumeStream(input: ConsumeStreamInput): Promise<ConsumeOutcome> {
      const ctx = Context.current();
      return guarded(() =>
        runConsumeStream(streamDeps, input, { heartbeat: (details) => ctx.heartbeat(details), signal: ctx.cancellationSignal }),
      );
    },

    async loadCommitted(input: { consumerId: string }): Promise<CommittedView> {
      return guarded(async () => committedView(await loadCommitted(pool, input.consumerId)));
    },

    async recordGapDecision(input: DecisionInput<GapDecision>): Promise<CommittedView> {
      return guarded(async () => committedView(await recordGapDecision(pool, input)));
    },

    async recordBindingDecision(input: DecisionInput<BindingDecision>): Promise<CommittedView> {
      return guarded(async () => committedView(await recordBindingDecision(pool, input)));
    },

    /** Decides held quarantine; deciding nothing (no held record matched) is refused so the operator sees it. */
    async resolveQuarantine(input: DecisionInput<QuarantineDecision> & { eventIds?: string[] }): Promise<{ resolved: number }> {
      return guarded(async () => {
        const resolved = await resolveQuarantine(pool, input);
        if (resolved === 0) {
          throw ApplicationFailure.create({
            type: 'InvalidDecision',
            message: `no held quarantine record of consumer ${input.consumerId} matched${input.eventIds ? ` events ${input.eventIds.join(', ')}` : ''}`,
            nonRetryable: true,
          });
        }
        return { resolved };
      });
    },

    /** Polls the committed checkpoint until it reaches `generation` (a rebind's first commit), within a bound. */
    async waitForGeneration(input: WaitForGenerationInput): Promise<CommittedView> {
      const ctx = Context.current();
      const pollMs = input.pollMs ?? 500;
      const deadline = Date.now() + input.timeoutMs;
      for (;;) {
        const view = await guarded(async () => committedView(await loadCommitted(pool, input.consumerId)));
        ctx.heartbeat({ generation: view.summary.generation, position: view.summary.position });
        if ((view.summary.generation ?? 0) >= input.generation) return view;
        if (Date.now() >= deadline) {
          throw ApplicationFailure.create({
            type: 'GenerationNotReached',
            message: `consumer ${input.consumerId} did not commit generation ${input.generation} within ${input.timeoutMs} ms (still at ${view.summary.generation ?? 'none'})`,
            nonRetryable: true,
          });
        }
        await ctx.sleep(pollMs); // rejects with CancelledFailure when the workflow cancels the wait
      }
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
