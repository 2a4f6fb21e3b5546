// The Temporal-agnostic core of the `consumeStream` activity: socket → codec → SessionFence → Session →
// StagingBuffer → commitCheckpoint → ACK (DESIGN.md "One frame's journey"). One run holds a bounded lease;
// each connection is a new session epoch, and a frame or callback of an older epoch is dropped.
// Protocol stops are returned as a ConsumeOutcome; transport trouble past the retry bound is thrown.
import WebSocket from 'ws';
import { backoffDelay, type Backoff } from '../protocol/backoff.js';
import { filterHash } from '../protocol/canonical.js';
import {
  decodeServerFrame,
  encodeClientFrame,
  WireError,
  type ClientFrameBody,
  type StartRequest,
  type StreamFilter,
} from '../protocol/codec.js';
import { ServerStaleGeneration, Session, type SessionAction, type SessionStop } from '../protocol/session.js';
import { SessionFence } from '../protocol/session-fence.js';
import { StagingBoundExceeded, type StagingLimits } from '../protocol/staging.js';
import type { ActionRules, CheckpointPlan, CommittedState, QuarantinePolicy } from '../protocol/types.js';
import type { CommitResult } from '../db/commit.js';
import { ConflictingEvent, Fenced, HeldQuarantine, InvalidPlan, StorageFailure } from '../db/errors.js';
import { withinBound } from './commit-bound.js';
import type {
  CheckpointSummary,
  ConsumeOutcome,
  ConsumeStreamInput,
  StreamCounters,
  StreamHeartbeat,
} from './types.js';
import { emptyCounters } from './types.js';

export interface ConsumeStreamLog {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export interface ConsumeStreamConfig {
  url: string;
  apiKey: string;
  maxFrameBytes: number;
  staging: StagingLimits;
  quarantinePolicy: QuarantinePolicy;
  actions: ActionRules;
  heartbeatEveryMs: number;
  connectTimeoutMs: number;
  reconnect: Backoff;
  /**
   * A commit still unfinished after this long fails the run (retried from the committed checkpoint) rather than
   * heartbeating a frozen position; its result, should it come, is never ACKed. Unbounded when omitted.
   */
  commitBoundMs?: number;
}

export interface ConsumeStreamDeps {
  /** db functions bound to a pool */
  store: {
    /** With `existingOnly`, a consumer without a row gets none (null): nothing is written. */
    acquireLease(consumerId: string, options: { existingOnly: boolean }): Promise<CommittedState | null>;
    commitCheckpoint(plan: CheckpointPlan): Promise<CommitResult>;
  };
  config: ConsumeStreamConfig;
  log: ConsumeStreamLog;
  /** Test cut points (kill -9 between stage, commit and ACK; a freeze inside the commit, given to the store). */
  hooks?: {
    afterStage?(position: number): void | Promise<void>;
    insideCommit?(position: number): void | Promise<void>;
    afterCommit?(position: number): void | Promise<void>;
    afterAck?(position: number): void | Promise<void>;
  };
}

export interface ConsumeStreamContext {
  heartbeat(details: StreamHeartbeat): void;
  signal: AbortSignal;
}

/** The database is behind the workflow's copy: a restored backup or a bug. Not retryable. */
export class DatabaseBehind extends Error {
  override readonly name = 'DatabaseBehind';
  readonly code = 'database_behind' as const;
  readonly retryable = false;
  constructor(
    readonly consumerId: string,
    /** null: the database has no checkpoint row for the consumer at all. */
    readonly databaseVersion: number | null,
    readonly expectedVersion: number,
  ) {
    super(
      databaseVersion === null
        ? `database has no checkpoint for consumer ${consumerId}, the workflow expects version ${expectedVersion} (another database, a restored backup or a bug); nothing was written`
        : `database for consumer ${consumerId} is behind the workflow: version ${databaseVersion} < expected ${expectedVersion} (restored backup or bug)`,
    );
  }
}

/** Another attempt owns the consumer's lease: this one is a zombie and stops without ACK. */
export class LeaseLost extends Error {
  override readonly name = 'LeaseLost';
  readonly code = 'lease_lost' as const;
  readonly retryable = false;
  constructor(
    readonly consumerId: string,
    readonly fenced: Fenced,
  ) {
    super(`lease lost for consumer ${consumerId}: ${fenced.message}`);
  }
}

export type StreamTransportCode =
  | 'connect_failed'
  | 'connection_lost'
  | 'protocol_violation'
  | 'staging_bound_exceeded'
  | 'stale_generation'
  | 'overloaded'
  | 'slow_consumer';

/** Reconnects ran out or the server asked us to back off: Temporal retries the activity. */
export class StreamTransportError extends Error {
  override readonly name = 'StreamTransportError';
  readonly retryable = true;
  constructor(
    readonly code: StreamTransportCode,
    message: string,
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
}

interface StartPlan {
  request: StartRequest;
  filter: StreamFilter;
  /** rebind and explicit starts return `rebound` after the first commit of the new binding */
  returnsRebound: boolean;
}

/** Received frames waiting behind the one being handled (and its commit) before the socket stops reading. */
const MAX_QUEUED_FRAMES = 1_024;

type ConnectionEnd =
  | { kind: 'outcome'; outcome: ConsumeOutcome }
  | { kind: 'throw'; error: Error }
  | { kind: 'reconnect'; code: StreamTransportCode; message: string; progressed: boolean }
  /** the lease ran out or the activity was cancelled */
  | { kind: 'finished' };

export async function consumeStream(
  deps: ConsumeStreamDeps,
  input: ConsumeStreamInput,
  ctx: ConsumeStreamContext,
): Promise<ConsumeOutcome> {
  const { expected } = input;
  // The workflow holds a committed copy: a database without this consumer is behind (restored, or another
  // database), and nothing may be written for it.
  const existingOnly = expected !== null && (expected.version > 0 || expected.token !== null);
  const state = await deps.store.acquireLease(input.consumerId, { existingOnly });
  if (state === null || (expected !== null && state.version < expected.version)) {
    throw new DatabaseBehind(input.consumerId, state?.version ?? null, expected?.version ?? 0);
  }
  return new StreamRun(deps, input, ctx, state).run();
}

class StreamRun {
  readonly #fence = new SessionFence();
  readonly #counters: StreamCounters = emptyCounters();
  #state: CommittedState;
  #leaseExpired = false;
  #committedThisRun = false;
  /** Ends the current connection gracefully (lease over or cancelled). */
  #finishCurrent: (() => void) | null = null;

  constructor(
    private readonly deps: ConsumeStreamDeps,
    private readonly input: ConsumeStreamInput,
    private readonly ctx: ConsumeStreamContext,
    state: CommittedState,
  ) {
    this.#state = state;
  }

  async run(): Promise<ConsumeOutcome> {
    const start = this.#planStart();
    if ('failed' in start) return this.#outcome({ kind: 'failed', code: 'config', message: start.failed });

    const { reconnect } = this.deps.config;
    const stopNow = () => this.#finishCurrent?.();
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
        if (end.kind === 'throw') throw end.error;
        // The new binding committed, though the connection then ended another way (lease, drop): report it.
        if (this.#committedThisRun && start.returnsRebound)
          return this.#outcome({ kind: 'rebound', generation: this.#state.generation ?? 0 });
        if (end.kind === 'finished') continue;
        failures = end.progressed ? 1 : failures + 1;
        if (failures > reconnect.maxAttempts) {
          throw new StreamTransportError(
            end.code,
            `stream failed ${failures} times in a row without progress; last: ${end.message}`,
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

  #connect(start: StartPlan): Promise<ConnectionEnd> {
    const { deps, ctx } = this;
    const { config, log } = deps;
    const epoch = this.#fence.begin();
    this.#counters.sessions += 1;
    const session = new Session({
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
    // ws enforces a hard cap; frames between maxFrameBytes and the cap reach the codec, which names them.
    const ws = new WebSocket(config.url, {
      maxPayload: config.maxFrameBytes * 2,
      handshakeTimeout: config.connectTimeoutMs,
    });
    let progressed = false;
    let result: ConnectionEnd | null = null;
    let queue: Promise<void> = Promise.resolve();

    return new Promise<ConnectionEnd>((resolve) => {
      // The handshake (socket, hello, authenticated, subscribed) must complete within connectTimeoutMs.
      const handshakeTimer = setTimeout(
        () =>
          end({
            kind: 'reconnect',
            code: 'connect_failed',
            message: `handshake not complete within ${config.connectTimeoutMs} ms (state ${session.state})`,
            progressed,
          }),
        config.connectTimeoutMs,
      );
      const ageTimer = setInterval(
        () => enqueue(() => perform(session.tick())),
        Math.max(10, Math.min(1_000, config.staging.maxAgeMs / 4)),
      );

      // Ends the connection once: no further frame is processed, an in-flight commit finishes first.
      const end = (value: ConnectionEnd): void => {
        if (result) return;
        result = value;
        clearTimeout(handshakeTimer);
        clearInterval(ageTimer);
        this.#finishCurrent = null;
        void queue.then(async () => {
          this.#fence.retire(epoch);
          session.stop();
          await closeSocket(ws);
          resolve(value);
        });
      };
      this.#finishCurrent = () => end({ kind: 'finished' });
      if (ctx.signal.aborted || this.#leaseExpired) this.#finishCurrent();

      const enqueue = (task: () => Promise<void> | void): void => {
        queue = queue
          .then(() => (result || !this.#fence.isActive(epoch) ? undefined : task()))
          .catch((error: unknown) =>
            end({ kind: 'throw', error: error instanceof Error ? error : new Error(String(error)) }),
          );
      };

      const send = (frame: ClientFrameBody): boolean => {
        if (ws.readyState !== WebSocket.OPEN) return false;
        ws.send(encodeClientFrame(frame));
        return true;
      };

      const stopWith = (stop: SessionStop): void => {
        switch (stop.kind) {
          case 'retry_later':
            log.warn('stream server asked to back off', { code: stop.code, retryAfterMs: stop.retryAfterMs });
            return end({
              kind: 'throw',
              error: new StreamTransportError(stop.code, `server: ${stop.code}: ${stop.message}`, stop.retryAfterMs),
            });
          case 'reset_required':
            log.warn('stream requires a reset decision; keeping the saved token', {
              reason: stop.reason,
              detectedLocally: stop.detectedLocally,
              history: stop.history,
            });
            return end({
              kind: 'outcome',
              outcome: this.#outcome({
                kind: 'reset_required',
                reason: stop.reason,
                history: stop.history,
                refusedToken: stop.refusedToken,
              }),
            });
          case 'cursor_mismatch':
            log.error('stream refused the token for this binding (cursor_mismatch)', { message: stop.message });
            return end({ kind: 'outcome', outcome: this.#outcome({ kind: 'cursor_mismatch', message: stop.message }) });
          case 'failed':
            log.error('stream session failed', { code: stop.code, message: stop.message });
            return end({
              kind: 'outcome',
              outcome: this.#outcome({ kind: 'failed', code: stop.code, message: stop.message }),
            });
        }
      };

      const commit = async (plan: CheckpointPlan): Promise<void> => {
        let committed: CommitResult;
        try {
          committed = await withinBound(deps.store.commitCheckpoint(plan), config.commitBoundMs, () => {
            log.error('commit stalled past its bound; failing the run without ACK', {
              position: plan.checkpoint.position,
              boundMs: config.commitBoundMs,
            });
            const stalled = new Error(`no answer within ${config.commitBoundMs} ms`);
            return new StorageFailure('commitCheckpoint', this.input.consumerId, undefined, true, { cause: stalled });
          });
        } catch (error) {
          return this.#commitFailed(error, plan, end);
        }
        progressed = true;
        this.#recordCommit(plan, committed);
        await deps.hooks?.afterCommit?.(plan.checkpoint.position);
        // The version moves even when no ACK may be sent, so the next plan fences correctly.
        const ack = session.committed(plan, committed);
        if (this.#fence.isActive(epoch) && !ctx.signal.aborted) {
          for (const action of ack) {
            if (action.type === 'send' && send(action.frame)) this.#counters.acksSent += 1;
          }
          await deps.hooks?.afterAck?.(plan.checkpoint.position);
        }
        if (start.returnsRebound) {
          end({ kind: 'outcome', outcome: this.#outcome({ kind: 'rebound', generation: plan.checkpoint.generation }) });
        }
      };

      const perform = async (actions: SessionAction[]): Promise<void> => {
        for (const action of actions) {
          if (result) return;
          switch (action.type) {
            case 'authenticate':
              send({ type: 'authenticate', apiKey: config.apiKey });
              break;
            case 'send':
              send(action.frame);
              break;
            case 'commit':
              await commit(action.plan);
              break;
            case 'cut_reached':
              log.info('stream caught up with its cut', { position: action.position, generation: session.generation });
              break;
            case 'stop':
              stopWith(action.stop);
              break;
            case 'reconnect': {
              const error = action.error;
              const code: StreamTransportCode =
                error instanceof StagingBoundExceeded
                  ? 'staging_bound_exceeded'
                  : error instanceof ServerStaleGeneration
                    ? 'stale_generation'
                    : 'protocol_violation';
              log.error('dropping the stream session; staging discarded', {
                code,
                error: error.message,
                position: this.#state.position,
              });
              end({ kind: 'reconnect', code, message: error.message, progressed });
              break;
            }
          }
        }
      };

      const onMessage = async (data: WebSocket.RawData, isBinary: boolean): Promise<void> => {
        let frame;
        try {
          frame = decodeServerFrame(data, { isBinary, maxFrameBytes: config.maxFrameBytes });
        } catch (error) {
          if (!(error instanceof WireError)) throw error;
          log.error('rejected a server frame', {
            code: error.code,
            frameType: error.frameType,
            field: error.field,
            reason: error.reason,
          });
          return end({ kind: 'reconnect', code: 'protocol_violation', message: error.message, progressed });
        }
        if (frame.type === 'hello') this.#counters.lastHeadPosition = frame.history.head;
        const actions = session.receive(frame);
        if (session.state === 'streaming') clearTimeout(handshakeTimer);
        await perform(actions);
        if (frame.type === 'batch' && !result && session.state === 'streaming')
          await deps.hooks?.afterStage?.(frame.position);
      };

      // Frames are handled one at a time behind commits. Without backpressure a replay arriving faster than
      // it commits would pile up here (hundreds of MB for a 50k-event replay); past the bound, stop reading
      // the socket (TCP pushes back on the server) until the queue has drained to half.
      let queuedFrames = 0;
      ws.on('message', (data, isBinary) => {
        if (!this.#fence.isActive(epoch)) return;
        queuedFrames += 1;
        if (queuedFrames >= MAX_QUEUED_FRAMES && !ws.isPaused) ws.pause();
        enqueue(() => onMessage(data, isBinary));
        queue = queue.then(() => {
          queuedFrames -= 1;
          if (ws.isPaused && queuedFrames <= MAX_QUEUED_FRAMES / 2) ws.resume();
        });
      });
      ws.on('error', (error: Error & { code?: string }) => {
        const tooLarge = error.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH';
        log.error(tooLarge ? 'rejected a server frame: frame_too_large' : 'stream socket error', {
          code: error.code,
          error: error.message,
        });
        end({
          kind: 'reconnect',
          code: tooLarge ? 'protocol_violation' : 'connection_lost',
          message: error.message,
          progressed,
        });
      });
      ws.on('close', (code, reason) => {
        end({
          kind: 'reconnect',
          code: 'connection_lost',
          message: `socket closed (${code}${reason.length ? ` ${reason.toString()}` : ''})`,
          progressed,
        });
      });
    });
  }

  #commitFailed(error: unknown, plan: CheckpointPlan, end: (value: ConnectionEnd) => void): void {
    const { log } = this.deps;
    const at = { position: plan.checkpoint.position, generation: plan.checkpoint.generation };
    if (error instanceof Fenced) {
      log.error('commit fenced: another attempt holds the lease; stopping without ACK', at);
      return end({ kind: 'throw', error: new LeaseLost(this.input.consumerId, error) });
    }
    if (error instanceof ConflictingEvent) {
      log.error('commit refused: an event conflicts with its saved receipt; no ACK', { ...at, eventId: error.eventId });
      return end({
        kind: 'outcome',
        outcome: this.#outcome({ kind: 'failed', code: 'conflicting_event', message: error.message }),
      });
    }
    if (error instanceof HeldQuarantine) {
      log.warn('checkpoint held by quarantined events; waiting for a decision', { ...at, held: error.items.length });
      return end({ kind: 'outcome', outcome: this.#outcome({ kind: 'held_quarantine', items: error.items }) });
    }
    if (error instanceof InvalidPlan) {
      log.error('commit refused the plan', { ...at, reason: error.reason });
      return end({
        kind: 'outcome',
        outcome: this.#outcome({ kind: 'failed', code: 'protocol_violation', message: error.message }),
      });
    }
    // Storage failures (connection lost, …): Temporal retries the activity from the committed state.
    end({ kind: 'throw', error: error instanceof Error ? error : new Error(String(error)) });
  }

  #recordCommit(plan: CheckpointPlan, committed: CommitResult): void {
    this.#committedThisRun = true;
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
    };
    const counters = this.#counters;
    counters.checkpointsCommitted += 1;
    counters.eventsApplied += committed.applied;
    counters.duplicates += committed.duplicates;
    counters.lastCommitAt = new Date().toISOString();
    this.#heartbeat();
  }

  #heartbeat(): void {
    const s = this.#state;
    this.ctx.heartbeat({
      position: s.position,
      version: s.version,
      generation: s.generation,
      headPosition: this.#counters.lastHeadPosition,
      counters: { ...this.#counters },
    });
  }

  #outcome<T extends DistributiveOmit<ConsumeOutcome, 'committed' | 'counters'>>(rest: T): ConsumeOutcome {
    return { ...rest, committed: checkpointSummary(this.#state), counters: { ...this.#counters } };
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

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** Closes gracefully so a last ACK is flushed, and terminates a peer that does not answer the close. */
async function closeSocket(ws: WebSocket, graceMs = 1_000): Promise<void> {
  ws.removeAllListeners();
  ws.on('error', () => undefined);
  // A socket paused for backpressure must read again to see the peer's close frame.
  if (ws.isPaused) ws.resume();
  if (ws.readyState === WebSocket.CLOSED) return;
  if (ws.readyState !== WebSocket.OPEN) {
    ws.terminate();
    return;
  }
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => ws.terminate(), graceMs);
    ws.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
    ws.close(1000, 'consumer done');
  });
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
