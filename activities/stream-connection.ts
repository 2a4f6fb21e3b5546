// One session of the streaming run over one WebSocket: socket → codec → Session → commitCheckpoint → ACK
// (docs/design.md "One frame's journey"). The run begins a new session epoch for each connection; a frame or callback
// of a retired epoch is dropped. A connection ends once, with a ConnectionEnd the run acts on; an in-flight
// commit finishes before its socket closes.
// Commits are pipelined (docs/protocol.md §5): frames of the next checkpoints are received, validated and staged while
// one commits; checkpoints that complete meanwhile wait, and the next commit covers all of them (group commit).
// ACKs follow each commit in checkpoint order; a commit that fails discards everything waiting behind it.
import type { Socket } from 'node:net';
import WebSocket from 'ws';
import { decodeServerFrame, encodeClientFrame, WireError, type ClientFrameBody } from '../protocol/codec.js';
import { ServerStaleGeneration, type Session, type SessionAction, type SessionStop } from '../protocol/session.js';
import type { SessionFence } from '../protocol/session-fence.js';
import { SharedBudget } from '../protocol/shared-budget.js';
import { StagingBoundExceeded } from '../protocol/staging.js';
import type { CheckpointPlan, CommittedState } from '../protocol/types.js';
import type { CheckpointOutcome, CommitResult } from '../db/commit-types.js';
import { StorageFailure } from '../db/errors.js';
import type { RecentExecutions } from '../db/recent-executions.js';
import { InvalidPlan } from '../domain/errors.js';
import { withinBound } from './commit-bound.js';
import { describeConflict, unreachable } from '../domain/outcomes.js';
import { LeaseLost, StreamTransportError, type StreamTransportCode } from './stream-errors.js';
import type { ConsumeStreamDeps, ConsumeStreamLog } from './stream-ports.js';
import type { ConsumeOutcome, StreamCounters } from './types.js';

/** Received frames waiting behind the one being handled (and its commit) before the socket stops reading. */
const MAX_QUEUED_FRAMES = 1_024;

/** Events of the waiting checkpoints one commit covers at most (a single larger checkpoint goes alone). */
const MAX_RUN_EVENTS = 2_000;

/**
 * The events staged and waiting to commit that the streaming runs of one process share: up to four runs may each
 * hold STAGING_MAX_EVENTS (`maxEvents`), more split four times that evenly, each keeping room for one full group
 * commit behind the one in flight. One worker's fifty consumers each holding 10,000 waiting events kept its peak
 * about 200 MiB higher, for no more throughput: it was saturated either way (docs/performance.md, under Scale).
 * The bound on one checkpoint's size stays `maxEvents` whatever the share.
 */
export function stagingBudget(maxEvents: number): SharedBudget {
  return new SharedBudget({ total: 4 * maxEvents, most: maxEvents, least: Math.min(maxEvents, MAX_RUN_EVENTS) });
}

/**
 * While a commit is in flight, frame handling yields to the event loop after this long, so that the commit's answer
 * is taken (and the next run sent) within a few ms instead of after the whole backlog of frames: the commits are the
 * replay's bottleneck, and waiting behind a backlog left Postgres idle more than half the time.
 */
const COMMIT_YIELD_MS = 4;

export type ConnectionEnd =
  | { kind: 'outcome'; outcome: ConsumeOutcome }
  | { kind: 'throw'; error: Error }
  | { kind: 'reconnect'; code: StreamTransportCode; message: string; progressed: boolean }
  /** the lease ran out or the activity was cancelled */
  | { kind: 'finished' };

/** An outcome before the run adds its committed checkpoint and counters. */
export type OutcomeStop = DistributiveOmit<ConsumeOutcome, 'committed' | 'counters'>;
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** The run a connection belongs to: it owns the committed state, the counters and the outcomes. */
export interface ConnectionRun {
  readonly consumerId: string;
  readonly counters: StreamCounters;
  readonly recentExecutions: RecentExecutions;
  /** Events that may wait to commit before frame handling waits for the commit in flight (the run's staging share). */
  waitingBound(): number;
  readonly signal: AbortSignal;
  committedState(): CommittedState;
  recordCommit(plan: CheckpointPlan, committed: CommitResult): void;
  /** Reports the run's progress (after a run of commits and their ACKs). */
  heartbeat(): void;
  outcome(stop: OutcomeStop): ConsumeOutcome;
}

/** The session this connection carries, under the epoch the run began for it. */
export interface ConnectionSession {
  session: Session;
  fence: SessionFence;
  epoch: number;
  /** rebind and explicit starts end with `rebound` after their first commit */
  returnsRebound: boolean;
}

export class StreamConnection {
  /** Settles once, after the connection ended and its socket closed. */
  readonly ended: Promise<ConnectionEnd>;
  #resolveEnded: (end: ConnectionEnd) => void = () => undefined;
  #result: ConnectionEnd | null = null;
  /**
   * Frames and ticks, handled one at a time, in order, by #drain; commits run beside them (#committing). A task
   * runs synchronously unless it must wait (for a commit to make room): no promise per frame, which Temporal's
   * async context tracking makes costly.
   */
  readonly #tasks: Array<() => void | Promise<void>> = [];
  #draining = false;
  /** Settled when the drain loop stopped (the connection waits for it before closing). */
  #drained: Promise<void> = Promise.resolve();
  #queuedFrames = 0;
  /** Complete checkpoints, in order, waiting for the commit in flight to finish. */
  #waiting: CheckpointPlan[] = [];
  #waitingEvents = 0;
  /** The commit loop while it runs: it takes everything waiting, commits it, ACKs it, until nothing waits. */
  #committing: Promise<void> | null = null;
  /** The loop's current run of checkpoints while it commits (settles, never rejects, when that run is done). */
  #committingRun: Promise<void> | null = null;
  /**
   * A commit on this connection moved the committed position forward (the run's reconnect count starts over).
   * Re-committing the same position is not progress (docs/protocol.md §6): a fault that recurs on every session
   * must escalate.
   */
  #progressed = false;
  readonly #ws: WebSocket;
  readonly #handshakeTimer: ReturnType<typeof setTimeout>;
  readonly #ageTimer: ReturnType<typeof setInterval>;

  constructor(
    private readonly deps: Pick<ConsumeStreamDeps, 'store' | 'config' | 'log' | 'hooks' | 'metrics'>,
    private readonly run: ConnectionRun,
    private readonly current: ConnectionSession,
  ) {
    this.ended = new Promise((resolve) => {
      this.#resolveEnded = resolve;
    });
    this.#ws = openSocket(deps.config);
    this.#handshakeTimer = this.#startHandshakeTimer();
    this.#ageTimer = this.#startAgeTimer();
    this.#listen();
  }

  /** Ends the connection gracefully (the lease ran out or the activity was cancelled); once ended, a no-op. */
  finish(): void {
    this.#end({ kind: 'finished' });
  }

  /** The handshake (socket, hello, authenticated, subscribed) must complete within connectTimeoutMs. */
  #startHandshakeTimer(): ReturnType<typeof setTimeout> {
    const { connectTimeoutMs } = this.deps.config;
    return setTimeout(
      () =>
        this.#end({
          kind: 'reconnect',
          code: 'connect_failed',
          message: `handshake not complete within ${connectTimeoutMs} ms (state ${this.current.session.state})`,
          progressed: this.#progressed,
        }),
      connectTimeoutMs,
    );
  }

  /** Lets the session commit a checkpoint that reached its maximum age while no frame arrives. */
  #startAgeTimer(): ReturnType<typeof setInterval> {
    const everyMs = Math.max(10, Math.min(1_000, this.deps.config.staging.maxAgeMs / 4));
    return setInterval(() => this.#enqueue(() => this.#perform(this.current.session.tick())), everyMs);
  }

  #listen(): void {
    const ws = this.#ws;
    ws.on('message', (data, isBinary) => this.#enqueueFrame(data, isBinary));
    ws.on('error', (error: Error & { code?: string }) => {
      const tooLarge = error.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH';
      this.deps.log.error(tooLarge ? 'rejected a server frame: frame_too_large' : 'stream socket error', {
        code: error.code,
        error: error.message,
      });
      this.#end({
        kind: 'reconnect',
        code: tooLarge ? 'protocol_violation' : 'connection_lost',
        message: error.message,
        progressed: this.#progressed,
      });
    });
    ws.on('close', (code, reason) => {
      this.#end({
        kind: 'reconnect',
        code: 'connection_lost',
        message: `socket closed (${code}${reason.length ? ` ${reason.toString()}` : ''})`,
        progressed: this.#progressed,
      });
    });
  }

  /**
   * Queues a received frame. Without backpressure a replay arriving faster than it commits would pile up here
   * (hundreds of MB for a 50k-event replay); past the bound, stop reading the socket (TCP pushes back on the
   * server) until the queue has drained to half.
   */
  #enqueueFrame(data: WebSocket.RawData, isBinary: boolean): void {
    const ws = this.#ws;
    if (!this.#isActive()) return;
    this.#queuedFrames += 1;
    if (this.#queuedFrames >= MAX_QUEUED_FRAMES && !ws.isPaused) ws.pause();
    this.#enqueue(() => {
      this.#queuedFrames -= 1;
      if (ws.isPaused && this.#queuedFrames <= MAX_QUEUED_FRAMES / 2) ws.resume();
      return this.#handleFrame(data, isBinary);
    });
  }

  /** Runs `task` after the queued ones, unless the connection ended or its epoch was retired meanwhile. */
  #enqueue(task: () => void | Promise<void>): void {
    this.#tasks.push(task);
    if (!this.#draining) this.#drained = this.#drain();
  }

  async #drain(): Promise<void> {
    this.#draining = true;
    try {
      let sliceStart = performance.now();
      for (let task = this.#tasks.shift(); task !== undefined; task = this.#tasks.shift()) {
        if (this.#committingRun !== null && performance.now() - sliceStart > COMMIT_YIELD_MS) {
          await new Promise<void>((resolve) => setImmediate(resolve));
          sliceStart = performance.now();
        }
        if (this.#result || !this.#isActive()) continue;
        const waiting = task();
        if (waiting !== undefined) await waiting;
      }
    } catch (error) {
      this.#end({ kind: 'throw', error: error instanceof Error ? error : new Error(String(error)) });
      this.#tasks.length = 0;
    } finally {
      this.#draining = false;
    }
  }

  #handleFrame(data: WebSocket.RawData, isBinary: boolean): void | Promise<void> {
    const { config, log, hooks } = this.deps;
    const { session } = this.current;
    let decoded;
    try {
      decoded = decodeServerFrame(data, { isBinary, maxFrameBytes: config.maxFrameBytes });
    } catch (error) {
      if (!(error instanceof WireError)) throw error;
      log.error('rejected a server frame', {
        code: error.code,
        frameType: error.frameType,
        field: error.field,
        reason: error.reason,
      });
      return this.#end({
        kind: 'reconnect',
        code: 'protocol_violation',
        message: error.message,
        progressed: this.#progressed,
      });
    }
    const { frame, bytes, plainText } = decoded;
    if (frame.type === 'hello') {
      this.run.counters.lastHeadPosition = frame.history.head;
      this.#recordFloor(frame.history);
    }
    if (frame.type === 'batch')
      this.run.counters.lastHeadPosition = Math.max(frame.position, this.run.counters.lastHeadPosition ?? 0);
    if (frame.type === 'hello' || frame.type === 'batch')
      this.deps.metrics?.headSeen(this.run.consumerId, frame.type === 'hello' ? frame.history.head : frame.position);
    const actions = session.receive(frame, bytes, plainText);
    if (session.state === 'streaming') clearTimeout(this.#handshakeTimer);
    const performing = this.#perform(actions);
    if (frame.type !== 'batch' || hooks?.afterStage === undefined) return performing;
    const position = frame.position;
    return performing === undefined
      ? this.#afterStage(session, position)
      : performing.then(() => this.#afterStage(session, position));
  }

  /** The test hook after a batch is staged, unless the frame ended the connection or left the session streaming. */
  #afterStage(session: Session, position: number): void | Promise<void> {
    if (!this.#result && session.state === 'streaming') return this.deps.hooks?.afterStage?.(position);
  }

  /**
   * Off the frame's path: maintenance only ever reads a floor lower than or equal to the source's, so a floor saved
   * late, or not at all (the next hello saves it), removes nothing it should not.
   */
  #recordFloor(history: { id: string; floor: number }): void {
    const { store, log } = this.deps;
    store.recordFloor?.(this.run.consumerId, history).catch((error: unknown) => {
      log.warn('could not save the retention floor', {
        historyId: history.id,
        floor: history.floor,
        error: error instanceof Error ? error.message : String(error),
      });
    });
  }

  /** Carries out the session's actions in order; a promise only when one must wait (a commit making room). */
  #perform(actions: readonly SessionAction[], from = 0): void | Promise<void> {
    const { config, log } = this.deps;
    for (let index = from; index < actions.length; index++) {
      if (this.#result) return;
      const action = actions[index]!;
      switch (action.type) {
        case 'authenticate':
          this.#send({ type: 'authenticate', apiKey: config.apiKey });
          break;
        case 'send':
          this.#send(action.frame);
          break;
        case 'commit': {
          const room = this.#commit(action.plan);
          if (room !== undefined) return room.then(() => this.#perform(actions, index + 1));
          break;
        }
        case 'cut_reached':
          log.info('stream caught up with its cut', {
            position: action.position,
            generation: this.current.session.generation,
          });
          break;
        case 'stop':
          this.#stopWith(action.stop);
          break;
        case 'reconnect':
          this.#dropSession(action.error);
          break;
      }
    }
  }

  /**
   * Hands a complete checkpoint to the commit loop, starting it if idle. Frame handling goes on meanwhile, except
   * when more than the run's staging share of events waits uncommitted (memory): then it waits for the run in flight,
   * and the next checkpoint checks the bound again (waiting for the whole loop to drain would leave the commits
   * idle while the next checkpoints are decoded). After a rebinding start's checkpoint it waits for the loop (its
   * connection ends with that commit).
   */
  #commit(plan: CheckpointPlan): Promise<void> | undefined {
    this.#waiting.push(plan);
    this.#waitingEvents += plan.events.length;
    this.#kickCommits();
    if (this.current.returnsRebound) return this.#committing ?? undefined;
    if (this.#waitingEvents > this.run.waitingBound()) return this.#committingRun ?? undefined;
  }

  /** Starts the commit loop when checkpoints wait and none is running (again when it ended as one arrived). */
  #kickCommits(): void {
    if (this.#committing !== null || this.#waiting.length === 0 || this.#result) return;
    this.#committing = this.#commitLoop().finally(() => {
      this.#committing = null;
      this.#kickCommits();
    });
  }

  async #commitLoop(): Promise<void> {
    try {
      while (this.#waiting.length > 0 && !this.#result) {
        // Everything waiting, up to a bound on one transaction's size (and on the wait for the first ACK).
        let take = 0;
        let events = 0;
        while (
          take < this.#waiting.length &&
          (take === 0 || events + this.#waiting[take]!.events.length <= MAX_RUN_EVENTS)
        )
          events += this.#waiting[take++]!.events.length;
        const plans = this.#waiting.splice(0, take);
        this.#waitingEvents -= events;
        const run = this.#commitRun(plans);
        this.#committingRun = run.then(
          () => undefined,
          () => undefined,
        );
        try {
          await run;
        } finally {
          this.#committingRun = null;
        }
      }
    } catch (error) {
      this.#end({ kind: 'throw', error: error instanceof Error ? error : new Error(String(error)) });
    }
  }

  /** Commits consecutive checkpoints together, then records and ACKs each in order while this session is active. */
  async #commitRun(staged: CheckpointPlan[]): Promise<void> {
    const { store, hooks } = this.deps;
    const { session, returnsRebound } = this.current;
    // Fenced on the version of the latest commit, not the one the plan saw when it was staged.
    const committedVersion = this.run.committedState().version;
    const plans = staged.map((plan) => ({ ...plan, fence: { ...plan.fence, version: committedVersion } }));
    let outcomes: CheckpointOutcome[];
    const { commitBoundMs } = this.deps.config;
    const commitStart = performance.now();
    try {
      outcomes = await withinBound(store.commitCheckpoints(plans, this.run.recentExecutions), commitBoundMs, () => {
        this.deps.log.error('commit stalled past its bound; failing the run without ACK', {
          position: plans[0]!.checkpoint.position,
          checkpoints: plans.length,
          boundMs: commitBoundMs,
        });
        const stalled = new Error(`no answer within ${commitBoundMs} ms`);
        return new StorageFailure('commitCheckpoint', this.run.consumerId, undefined, true, { cause: stalled });
      });
    } catch (error) {
      return this.#end(handleCommitFailure(error, plans[0]!, this.run, this.deps.log));
    }
    const commitEnd = performance.now();
    // The run's ACKs leave in one write, not a system call each; a test hook sees its ACK on the wire first.
    const acks = holdWrites(this.#ws);
    let recorded = 0;
    try {
      for (const [index, committed] of outcomes.entries()) {
        const plan = plans[index]!;
        if (committed.kind !== 'committed')
          return this.#end(handleCommitRefusal(committed, plan, this.run, this.deps.log));
        const { position: before, version: versionBefore } = this.run.committedState();
        // A checkpoint the database already held commits without a write: nothing for the counters.
        if (committed.version > versionBefore) {
          this.deps.metrics?.checkpointCommitted(
            this.run.consumerId,
            'stream',
            { position: plan.checkpoint.position, version: committed.version },
            committed,
            (commitEnd - commitStart) / 1000,
          );
        }
        if (before === null || plan.checkpoint.position > before) this.#progressed = true;
        this.run.recordCommit(plan, committed);
        recorded += 1;
        if (hooks?.afterCommit) await acks.released(() => hooks.afterCommit?.(plan.checkpoint.position));
        // The version moves even when no ACK may be sent, so the next plan fences correctly.
        const ack = session.committed(plan, committed);
        if (this.#isActive() && !this.run.signal.aborted) {
          for (const action of ack) {
            if (action.type === 'send' && this.#send(action.frame)) {
              this.run.counters.acksSent += 1;
              this.deps.metrics?.ackSent(this.run.consumerId, (performance.now() - commitEnd) / 1000);
            }
          }
          if (hooks?.afterAck) await acks.released(() => hooks.afterAck?.(plan.checkpoint.position));
        }
        if (returnsRebound) {
          return this.#end({
            kind: 'outcome',
            outcome: this.run.outcome({ kind: 'rebound', generation: plan.checkpoint.generation }),
          });
        }
      }
    } finally {
      acks.release();
      // One heartbeat for the run's checkpoints: the SDK sends the latest details at most once per interval anyway,
      // and encoding them for each of a catching-up run's many small checkpoints cost more than their ACKs.
      if (recorded > 0) this.run.heartbeat();
    }
  }

  #send(frame: ClientFrameBody): boolean {
    if (this.#ws.readyState !== WebSocket.OPEN) return false;
    this.#ws.send(encodeClientFrame(frame));
    return true;
  }

  /** A protocol stop of the session: an outcome for the workflow, or a retryable transport error. */
  #stopWith(stop: SessionStop): void {
    const { log } = this.deps;
    const outcome = (rest: OutcomeStop): void => this.#end({ kind: 'outcome', outcome: this.run.outcome(rest) });
    switch (stop.kind) {
      case 'retry_later':
        log.warn('stream server asked to back off', { code: stop.code, retryAfterMs: stop.retryAfterMs });
        return this.#end({
          kind: 'throw',
          error: new StreamTransportError(stop.code, `server: ${stop.code}: ${stop.message}`, stop.retryAfterMs),
        });
      case 'reset_required':
        log.warn('stream requires a reset decision; keeping the saved token', {
          reason: stop.reason,
          detectedLocally: stop.detectedLocally,
          history: stop.history,
        });
        return outcome({
          kind: 'reset_required',
          reason: stop.reason,
          history: stop.history,
          refusedToken: stop.refusedToken,
        });
      case 'cursor_mismatch':
        log.error('stream refused the token for this binding (cursor_mismatch)', { message: stop.message });
        return outcome({ kind: 'cursor_mismatch', message: stop.message });
      case 'failed':
        log.error('stream session failed', { code: stop.code, message: stop.message });
        return outcome({ kind: 'failed', code: stop.code, message: stop.message });
    }
  }

  /** The session cannot go on (staging bound, stale generation, protocol violation): reconnect from the checkpoint. */
  #dropSession(error: Error): void {
    const code: StreamTransportCode =
      error instanceof StagingBoundExceeded
        ? 'staging_bound_exceeded'
        : error instanceof ServerStaleGeneration
          ? 'stale_generation'
          : 'protocol_violation';
    this.deps.log.error('dropping the stream session; staging discarded', {
      code,
      error: error.message,
      position: this.run.committedState().position,
    });
    this.#end({ kind: 'reconnect', code, message: error.message, progressed: this.#progressed });
  }

  #isActive(): boolean {
    return this.current.fence.isActive(this.current.epoch);
  }

  /**
   * Ends the connection once: no further frame is processed and nothing waiting is committed; an in-flight commit
   * finishes (and is ACKed while the session is active) before the socket closes.
   */
  #end(value: ConnectionEnd): void {
    if (this.#result) return;
    this.#result = value;
    clearTimeout(this.#handshakeTimer);
    clearInterval(this.#ageTimer);
    this.#waiting = [];
    this.#waitingEvents = 0;
    void this.#drained.then(() => this.#committing).then(() => this.#close(value));
  }

  async #close(value: ConnectionEnd): Promise<void> {
    this.current.fence.retire(this.current.epoch);
    this.current.session.stop();
    await closeSocket(this.#ws);
    this.#resolveEnded(value);
  }
}

/** A commit that did not commit: no ACK; the outcome says why. */
export function handleCommitRefusal(
  refusal: Exclude<CheckpointOutcome, { kind: 'committed' }>,
  plan: CheckpointPlan,
  run: Pick<ConnectionRun, 'consumerId' | 'outcome'>,
  log: ConsumeStreamLog,
): ConnectionEnd {
  const at = { position: plan.checkpoint.position, generation: plan.checkpoint.generation };
  const outcome = (rest: OutcomeStop): ConnectionEnd => ({ kind: 'outcome', outcome: run.outcome(rest) });
  switch (refusal.kind) {
    case 'fenced':
      log.error('commit fenced: another attempt holds the lease; stopping without ACK', at);
      return { kind: 'throw', error: new LeaseLost(run.consumerId, refusal) };
    case 'conflict':
      log.error('commit refused: an event conflicts with its saved receipt; no ACK', {
        ...at,
        eventId: refusal.eventId,
      });
      return outcome({ kind: 'failed', code: 'conflicting_event', message: describeConflict(refusal) });
    case 'held_quarantine':
      log.warn('checkpoint held by quarantined events; waiting for a decision', { ...at, held: refusal.items.length });
      return outcome({ kind: 'held_quarantine', items: refusal.items });
    default:
      return unreachable(refusal);
  }
}

/** A commit that threw: the plan was refused (InvalidPlan) or storage failed. */
export function handleCommitFailure(
  error: unknown,
  plan: CheckpointPlan,
  run: Pick<ConnectionRun, 'outcome'>,
  log: ConsumeStreamLog,
): ConnectionEnd {
  if (error instanceof InvalidPlan) {
    const at = { position: plan.checkpoint.position, generation: plan.checkpoint.generation };
    log.error('commit refused the plan', { ...at, reason: error.reason });
    return {
      kind: 'outcome',
      outcome: run.outcome({ kind: 'failed', code: 'protocol_violation', message: error.message }),
    };
  }
  // Storage failures (connection lost, …): Temporal retries the activity from the committed state.
  return { kind: 'throw', error: error instanceof Error ? error : new Error(String(error)) };
}

/** A socket's writes held until `release`; `released` runs an awaited step with them sent and not held. */
interface HeldWrites {
  released(step: () => void | Promise<void>): Promise<void>;
  release(): void;
}

/**
 * Holds the socket's writes so that several frames leave in one system call. ws writes each frame as it is sent and
 * has no API for this; its socket (`_socket`, a net.Socket) does: cork nests with the one ws takes around a frame.
 * Never held across an await (a pong or a close frame would wait too): an awaited step goes through `released`.
 */
function holdWrites(ws: WebSocket): HeldWrites {
  const socket = (ws as unknown as { _socket?: Socket | null })._socket;
  let held = false;
  const hold = () => {
    if (held || !socket || socket.destroyed) return;
    socket.cork();
    held = true;
  };
  const release = () => {
    if (!held) return;
    held = false;
    socket!.uncork();
  };
  hold();
  return {
    release,
    async released(step) {
      release();
      await step();
      hold();
    },
  };
}

/** ws enforces a hard cap; frames between maxFrameBytes and the cap reach the codec, which names them. */
function openSocket(config: ConsumeStreamDeps['config']): WebSocket {
  return new WebSocket(config.url, {
    maxPayload: config.maxFrameBytes * 2,
    handshakeTimeout: config.connectTimeoutMs,
  });
}

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
