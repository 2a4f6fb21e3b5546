// The client side of one connection as a pure state machine (docs/protocol.md §3):
// awaiting hello → authenticate → awaiting authenticated → subscribe → awaiting subscribed → streaming.
// Feed it decoded frames; it answers with actions for the caller to perform. It never holds the API key:
// it asks the caller to authenticate.
import { filterHash } from './canonical.js';
import {
  PROTOCOL_NAME,
  WireError,
  type ClientFrameBody,
  type ErrorCode,
  type History,
  type ResetReason,
  type ServerFrame,
  type StartRequest,
  type StreamFilter,
} from './codec.js';
import { FrameSequence, ProtocolViolation } from './session-fence.js';
import { StagingBuffer, StagingBoundExceeded, type StagingLimits } from './staging.js';
import type { ActionRules, Binding, CheckpointPlan, QuarantinePolicy } from './types.js';

export type SessionState =
  'awaiting_hello' | 'awaiting_authenticated' | 'awaiting_subscribed' | 'streaming' | 'stopped';

/** Why a session stops for good (the caller returns or throws accordingly; it does not reconnect). */
export type SessionStop =
  | { kind: 'reset_required'; reason: ResetReason; history: History; refusedToken: string; detectedLocally: boolean }
  | { kind: 'cursor_mismatch'; message: string }
  /** overloaded / slow_consumer: retry later with the same committed token */
  | { kind: 'retry_later'; code: 'overloaded' | 'slow_consumer'; retryAfterMs: number | undefined; message: string }
  /** unauthorized, protocol_violation: an operator must look */
  | { kind: 'failed'; code: ErrorCode; message: string };

export type SessionAction =
  /** Send `authenticate` with the API key the caller holds. */
  | { type: 'authenticate' }
  | { type: 'send'; frame: ClientFrameBody }
  /** Commit this plan, then call `committed()`; the ACK comes from there. */
  | { type: 'commit'; plan: CheckpointPlan }
  | { type: 'cut_reached'; position: number }
  | { type: 'stop'; stop: SessionStop }
  /** Drop the connection, discard staging, reconnect from the committed checkpoint. */
  | { type: 'reconnect'; error: SessionDropReason };

/** Why a connection is dropped and resumed from the committed checkpoint. */
export type SessionDropReason = ProtocolViolation | StagingBoundExceeded | WireError | ServerStaleGeneration;

/** The server refused an ACK naming an old generation: a stale callback or a bug, so start the session over. */
export class ServerStaleGeneration extends Error {
  override readonly name = 'ServerStaleGeneration';
  readonly code = 'stale_generation' as const;
}

export interface SessionOptions {
  consumerId: string;
  subscriptionId: string;
  filter: StreamFilter;
  start: StartRequest;
  /** The saved binding (null before the first commit). Resume and rebind are checked against it. */
  saved: Binding | null;
  /** Committed checkpoint position (null before the first commit). */
  committedPosition: number | null;
  /** The lease epoch and version this attempt holds; the version moves with every commit. */
  fence: { leaseEpoch: number; version: number };
  quarantinePolicy: QuarantinePolicy;
  actions: ActionRules;
  staging: StagingLimits;
  now: () => number;
}

export class Session {
  readonly #opts: SessionOptions;
  readonly #sequence = new FrameSequence();
  readonly #sentFilterHash: string;
  #state: SessionState = 'awaiting_hello';
  #fence: { leaseEpoch: number; version: number };
  #hello: Extract<ServerFrame, { type: 'hello' }> | null = null;
  #staging: StagingBuffer | null = null;
  #cutPosition: number | null = null;
  #caughtUp = false;

  constructor(opts: SessionOptions) {
    this.#opts = opts;
    this.#fence = { ...opts.fence };
    this.#sentFilterHash = filterHash(opts.filter);
  }

  get state(): SessionState {
    return this.#state;
  }

  get caughtUp(): boolean {
    return this.#caughtUp;
  }

  get generation(): number | null {
    return this.#staging?.generation ?? null;
  }

  /**
   * Handles one decoded server frame; `wireBytes` is the size of its message and `plainText` whether its strings are
   * plain (decodeServerFrame's), absent for a frame built in memory. Violations come back as a `reconnect` action,
   * never as a throw.
   */
  receive(frame: ServerFrame, wireBytes?: number, plainText = false): SessionAction[] {
    if (this.#state === 'stopped') return [];
    try {
      this.#sequence.accept(frame);
      return this.#dispatch(frame, wireBytes, plainText);
    } catch (error) {
      if (error instanceof ProtocolViolation || error instanceof StagingBoundExceeded) return this.#drop(error);
      // Malformed event data (a WireError naming the frame and field) breaks the contract just the same.
      if (error instanceof WireError) return this.#drop(error);
      throw error;
    }
  }

  /** Periodic check of the staging age bound. */
  tick(): SessionAction[] {
    if (this.#state !== 'streaming' || !this.#staging) return [];
    try {
      this.#staging.checkAge();
      return [];
    } catch (error) {
      if (error instanceof StagingBoundExceeded) return this.#drop(error);
      throw error;
    }
  }

  /** The plan's commit succeeded with this new version: the only way an ACK is produced. */
  committed(plan: CheckpointPlan, result: { version: number }): SessionAction[] {
    this.#fence = { leaseEpoch: this.#fence.leaseEpoch, version: result.version };
    if (this.#state === 'stopped' || !this.#hello) return [];
    return [
      {
        type: 'send',
        frame: {
          type: 'ack',
          connectionId: this.#hello.connectionId,
          generation: plan.checkpoint.generation,
          position: plan.checkpoint.position,
          token: plan.checkpoint.token,
        },
      },
    ];
  }

  /** The caller is done with this session (socket closed, commit failed, lease over): staging is dropped. */
  stop(): void {
    this.#state = 'stopped';
    this.#staging?.discard();
  }

  #drop(error: SessionDropReason): SessionAction[] {
    this.stop();
    return [{ type: 'reconnect', error }];
  }

  #finish(stop: SessionStop): SessionAction[] {
    this.stop();
    return [{ type: 'stop', stop }];
  }

  #dispatch(frame: ServerFrame, wireBytes: number | undefined, plainText: boolean): SessionAction[] {
    // reset_required and error may answer any client frame.
    if (frame.type === 'reset_required') {
      return this.#finish({
        kind: 'reset_required',
        reason: frame.reason,
        history: frame.history,
        refusedToken: frame.token,
        detectedLocally: false,
      });
    }
    if (frame.type === 'error') return this.#onError(frame);
    switch (this.#state) {
      case 'awaiting_hello':
        if (frame.type !== 'hello') throw unexpected(frame.type, 'hello');
        return this.#onHello(frame);
      case 'awaiting_authenticated':
        if (frame.type !== 'authenticated') throw unexpected(frame.type, 'authenticated');
        this.#state = 'awaiting_subscribed';
        return [
          {
            type: 'send',
            frame: {
              type: 'subscribe',
              consumerId: this.#opts.consumerId,
              subscriptionId: this.#opts.subscriptionId,
              filter: this.#opts.filter,
              start: this.#opts.start,
            },
          },
        ];
      case 'awaiting_subscribed':
        if (frame.type !== 'subscribed') throw unexpected(frame.type, 'subscribed');
        return this.#onSubscribed(frame);
      case 'streaming':
        return this.#onStreaming(frame, wireBytes, plainText);
      case 'stopped':
        return [];
    }
  }

  #onHello(frame: Extract<ServerFrame, { type: 'hello' }>): SessionAction[] {
    if (frame.protocol !== PROTOCOL_NAME) {
      throw new ProtocolViolation(
        'hello_mismatch',
        'hello',
        'protocol',
        `expected ${PROTOCOL_NAME}, got ${JSON.stringify(frame.protocol)}`,
      );
    }
    this.#hello = frame;
    const saved = this.#checkedAgainstSaved();
    if (saved) {
      if (frame.stream !== saved.stream) {
        throw new ProtocolViolation(
          'hello_mismatch',
          'hello',
          'stream',
          `expected ${saved.stream}, got ${frame.stream}`,
        );
      }
      if (frame.history.id !== saved.historyId && 'token' in this.#opts.start) {
        // The journal was rebuilt: the saved token means nothing there. Stop without an implicit jump.
        return this.#finish({
          kind: 'reset_required',
          reason: 'history_rebuilt',
          history: frame.history,
          refusedToken: this.#opts.start.token,
          detectedLocally: true,
        });
      }
    }
    this.#state = 'awaiting_authenticated';
    return [{ type: 'authenticate' }];
  }

  /** Resume and rebind continue the saved binding; explicit starts create a new one. */
  #checkedAgainstSaved(): Binding | null {
    return this.#opts.start.mode === 'resume' || this.#opts.start.mode === 'rebind' ? this.#opts.saved : null;
  }

  #onSubscribed(frame: Extract<ServerFrame, { type: 'subscribed' }>): SessionAction[] {
    const o = this.#opts;
    const mismatch = (field: string, reason: string) =>
      new ProtocolViolation('binding_mismatch', 'subscribed', field, reason);
    if (frame.consumerId !== o.consumerId)
      throw mismatch('consumerId', `expected ${o.consumerId}, got ${frame.consumerId}`);
    if (frame.subscriptionId !== o.subscriptionId)
      throw mismatch('subscriptionId', `expected ${o.subscriptionId}, got ${frame.subscriptionId}`);
    if (frame.filterHash !== this.#sentFilterHash)
      throw mismatch('filterHash', `expected ${this.#sentFilterHash} (the filter sent), got ${frame.filterHash}`);
    const savedGeneration = o.saved?.generation ?? null;
    if (o.start.mode === 'resume' || o.start.mode === 'rebind') {
      if (savedGeneration === null || o.committedPosition === null) {
        throw mismatch('generation', `${o.start.mode} needs a saved binding and checkpoint`);
      }
      const expected = o.start.mode === 'resume' ? savedGeneration : savedGeneration + 1;
      if (frame.generation !== expected) {
        throw new ProtocolViolation(
          'generation_mismatch',
          'subscribed',
          'generation',
          `expected ${expected} for ${o.start.mode}, got ${frame.generation}`,
        );
      }
      if (frame.startPosition !== o.committedPosition) {
        throw mismatch(
          'startPosition',
          `expected the committed position ${o.committedPosition}, got ${frame.startPosition}`,
        );
      }
    }
    if (frame.cut.position < frame.startPosition) {
      throw new ProtocolViolation(
        'cut_mismatch',
        'subscribed',
        'cut.position',
        `${frame.cut.position} is below startPosition ${frame.startPosition}`,
      );
    }
    if (frame.sourceQuality.asOf !== frame.cut.position) {
      throw new ProtocolViolation(
        'cut_mismatch',
        'subscribed',
        'sourceQuality.asOf',
        `${frame.sourceQuality.asOf} is not the cut ${frame.cut.position}`,
      );
    }
    const hello = this.#hello;
    if (!hello) throw unexpected('subscribed', 'hello');
    const binding: Binding = {
      consumerId: o.consumerId,
      subscriptionId: o.subscriptionId,
      stream: hello.stream,
      historyId: hello.history.id,
      filter: o.filter,
      filterHash: this.#sentFilterHash,
      generation: frame.generation,
      mappings: frame.mappings,
    };
    this.#cutPosition = frame.cut.position;
    this.#staging = new StagingBuffer({
      binding,
      startMode: o.start.mode,
      startPosition: frame.startPosition,
      cut: {
        position: frame.cut.position,
        snapshot: frame.sourceQuality.scopes.map((s) => ({ position: s.lastPosition, scope: s.scope, state: s.state })),
      },
      limits: o.staging,
      now: o.now,
    });
    this.#state = 'streaming';
    return [];
  }

  #onStreaming(frame: ServerFrame, wireBytes: number | undefined, plainText: boolean): SessionAction[] {
    const staging = this.#staging;
    if (!staging) throw unexpected(frame.type, 'subscribed');
    switch (frame.type) {
      case 'batch':
        staging.stageBatch(frame, wireBytes, plainText);
        return [];
      case 'quality':
        staging.stageQuality(frame);
        return [];
      case 'checkpoint': {
        const plan = staging.checkpoint(frame, {
          fence: this.#fence,
          quarantinePolicy: this.#opts.quarantinePolicy,
          actions: this.#opts.actions,
        });
        return [{ type: 'commit', plan }];
      }
      case 'caught_up':
        if (frame.generation !== staging.generation) {
          throw new ProtocolViolation(
            'generation_mismatch',
            'caught_up',
            'generation',
            `${frame.generation} is not the active generation ${staging.generation}`,
          );
        }
        if (frame.cut.position !== this.#cutPosition) {
          throw new ProtocolViolation(
            'cut_mismatch',
            'caught_up',
            'cut.position',
            `${frame.cut.position} is not the subscribed cut ${this.#cutPosition}`,
          );
        }
        if (!staging.cutReached) {
          throw new ProtocolViolation(
            'cut_mismatch',
            'caught_up',
            'cut.position',
            `no checkpoint reached the cut ${frame.cut.position} yet`,
          );
        }
        this.#caughtUp = true;
        return [{ type: 'cut_reached', position: frame.cut.position }];
      default:
        throw unexpected(frame.type, 'batch, quality, checkpoint or caught_up');
    }
  }

  #onError(frame: Extract<ServerFrame, { type: 'error' }>): SessionAction[] {
    switch (frame.code) {
      case 'overloaded':
      case 'slow_consumer':
        return this.#finish({
          kind: 'retry_later',
          code: frame.code,
          retryAfterMs: frame.retryAfterMs,
          message: frame.message,
        });
      case 'cursor_mismatch':
        return this.#finish({ kind: 'cursor_mismatch', message: frame.message });
      case 'stale_generation':
        // The server saw an ACK naming an old generation: drop this session and start clean from the committed state.
        return this.#drop(new ServerStaleGeneration(`server reported stale_generation: ${frame.message}`));
      case 'unauthorized':
      case 'protocol_violation':
        return this.#finish({ kind: 'failed', code: frame.code, message: frame.message });
    }
  }
}

function unexpected(frameType: string, expected: string): ProtocolViolation {
  return new ProtocolViolation('unexpected_frame', frameType, 'type', `expected ${expected}`);
}
