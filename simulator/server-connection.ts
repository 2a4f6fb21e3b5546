// One WebSocket connection of the reference server, from its hello to its close: authentication, the
// subscribe decision (resume, rebind, live_cut, from_floor), replay up to the cut, live delivery, checkpoints
// and the ACK window. It answers to its server through ConnectionHost and asks faults.ts when to misbehave.
import type { Socket } from 'node:net';
import type { RawData, WebSocket } from 'ws';
import {
  PROTOCOL_NAME,
  decodeClientFrame,
  encodeServerFrame,
  type ClientFrameOf,
  type DeliveryMode,
  type ErrorCode,
  type ResetReason,
  type ServerFrameBody,
} from '../protocol/codec.js';
import { filterHash as computeFilterHash } from '../protocol/canonical.js';
import {
  applyEventFaults,
  caughtUpCut,
  takeAckFault,
  takeDropAfterFrames,
  takeDropAtPosition,
  takeFrameSequenceFault,
  takeSubscribeOverload,
  type FaultPlan,
} from './faults.js';
import { compileFilter, mappingsFor, type EventMatcher } from './filter.js';
import type { Journal } from './journal.js';
import type { JournalEvent, Transition } from './journal-types.js';
import type { TokenClaims, TokenSigner } from './tokens.js';

export interface AckRecord {
  connectionId: string;
  consumerId: string;
  subscriptionId: string;
  generation: number;
  position: number;
  token: string;
  at: Date;
}

export type AckRejection =
  'wrong_connection' | 'stale_generation' | 'unknown_checkpoint' | 'not_subscribed' | 'fault_refused' | 'fault_lost';
export interface RejectedAckRecord extends AckRecord {
  reason: AckRejection;
}

export interface ConnectionRecord {
  connectionId: string;
  openedAt: Date;
  closed: boolean;
  consumerId?: string;
  subscriptionId?: string;
  generation?: number;
  startPosition?: number;
  cut?: number;
}

export interface SubscriptionRecord {
  connectionId: string;
  consumerId: string;
  subscriptionId: string;
  generation: number;
  filterHash: string;
  startPosition: number;
  cut: number;
  mode: 'resume' | 'rebind' | 'live_cut' | 'from_floor';
}

/** What a connection reports to its server, by kind. */
export interface ConnectionReports {
  ack: AckRecord;
  rejectedAck: RejectedAckRecord;
  subscription: SubscriptionRecord;
}

export interface ConnectionSettings {
  /** A replay checkpoint after this many scanned transitions (matched or not). */
  checkpointEvery: number;
  /** A live checkpoint after this many live transitions... */
  liveCheckpointEvery: number;
  /** ...or this long after the first live transition not yet covered by a checkpoint. */
  liveCheckpointIntervalMs: number;
  /** Delivery pauses while this many checkpoints are unacknowledged... */
  maxUnackedCheckpoints: number;
  /** ...and the connection fails with `slow_consumer` when the window stays full this long. */
  slowConsumerGraceMs: number;
  maxFrameBytes: number;
}

/** The server as its connections see it. */
export interface ConnectionHost {
  readonly faults: FaultPlan;
  readonly journal: Journal;
  readonly stream: string;
  readonly settings: ConnectionSettings;
  readonly signer: TokenSigner;
  /** The principal of a valid API key, else undefined. */
  checkApiKey(key: string): string | undefined;
  /** Highest generation issued to a consumer's subscription (0 if none). */
  issuedGeneration(consumerId: string, subscriptionId: string): number;
  recordGeneration(consumerId: string, subscriptionId: string, generation: number): void;
  /** Makes `connection` the active one of its binding (the previous one is superseded). */
  activate(connection: ServerConnection, consumerId: string, subscriptionId: string): void;
  report<K extends keyof ConnectionReports>(kind: K, value: ConnectionReports[K]): void;
  disconnected(record: ConnectionRecord): void;
}

/** What every frame builder produces: the codec adds `v`, the connection adds `frameSequence`. */
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
type UnsequencedFrame = DistributiveOmit<ServerFrameBody, 'frameSequence'>;

const SEND_HIGH_WATER = 256;

interface ActiveBinding {
  consumerId: string;
  subscriptionId: string;
  generation: number;
  filterHash: string;
  matcher: EventMatcher;
  cut: number;
}

type ConnectionState = 'awaiting_auth' | 'awaiting_subscribe' | 'replay' | 'live' | 'closed';

export class ServerConnection {
  private state: ConnectionState = 'awaiting_auth';
  private sequence = 0;
  /** Frames built so far (a duplicate-sequence fault makes this differ from `sequence`). */
  private framesBuilt = 0;
  private framesSent = 0;
  private heldFrame: string | undefined;
  private binding: ActiveBinding | undefined;
  /** Last journal position scanned for this connection. */
  private scanned = 0;
  private lastCheckpointPosition = -1;
  private batchesSinceCheckpoint = 0;
  private transitionsSinceCheckpoint = 0;
  private readonly sentCheckpoints = new Map<string, { position: number; index: number }>();
  private checkpointCount = 0;
  private ackedCount = 0;
  private pendingSends = 0;
  private drainWaiters: Array<() => void> = [];
  private pumping = false;
  private liveCheckpointDue = false;
  private liveTimer: NodeJS.Timeout | undefined;
  private slowTimer: NodeJS.Timeout | undefined;
  private readonly closed: Promise<void>;

  constructor(
    private readonly host: ConnectionHost,
    private readonly ws: WebSocket,
    private readonly record: ConnectionRecord,
    /** The connection's TCP socket, corked while a burst of frames is written (one syscall for the burst). */
    private readonly socket: Socket,
  ) {
    this.closed = new Promise((resolve) => ws.once('close', () => resolve()));
    ws.on('close', () => {
      this.state = 'closed';
      this.clearTimers();
      this.record.closed = true;
      this.releaseDrainWaiters();
      this.host.disconnected(this.record);
    });
    ws.on('error', () => {
      // A transport error is followed by 'close'; nothing else to do.
    });
    ws.on('message', (data: RawData, isBinary: boolean) => this.onMessage(data, isBinary));
  }

  get connectionId(): string {
    return this.record.connectionId;
  }

  start(): void {
    this.send({
      type: 'hello',
      protocol: PROTOCOL_NAME,
      connectionId: this.connectionId,
      stream: this.host.stream,
      history: this.host.journal.history,
    });
  }

  onJournalAppend(): void {
    if (this.state === 'live') void this.pump();
  }

  /** Abrupt close: no close frame, as when the network fails. */
  terminate(): Promise<void> {
    this.state = 'closed';
    this.ws.terminate();
    return this.closed;
  }

  /** A simulated network failure right after the frames already sent: they are flushed, nothing follows. */
  private dropAfterFlush(): void {
    this.state = 'closed';
    this.clearTimers();
    if (this.pendingSends === 0) this.ws.terminate();
    else this.drainWaiters.push(() => this.ws.terminate());
  }

  /** A newer connection of the same binding took over. */
  supersede(): void {
    this.closeWith(4000, 'superseded by a newer connection');
  }

  private onMessage(data: RawData, isBinary: boolean): void {
    if (this.state === 'closed') return;
    let frame;
    try {
      frame = decodeClientFrame(isBinary ? data : rawText(data), {
        isBinary,
        maxFrameBytes: this.host.settings.maxFrameBytes,
      });
    } catch (err) {
      this.fail('protocol_violation', err instanceof Error ? err.message : 'undecodable frame');
      return;
    }
    switch (frame.type) {
      case 'authenticate': {
        if (this.state !== 'awaiting_auth')
          return this.fail('protocol_violation', 'authenticate is only valid once, right after hello');
        const principal = this.host.checkApiKey(frame.apiKey);
        if (!principal) return this.fail('unauthorized', 'the API key is not valid');
        this.state = 'awaiting_subscribe';
        this.send({ type: 'authenticated', principal });
        return;
      }
      case 'subscribe':
        if (this.state !== 'awaiting_subscribe') {
          return this.fail(
            'protocol_violation',
            this.state === 'awaiting_auth' ? 'authenticate before subscribe' : 'a connection subscribes once',
          );
        }
        return this.subscribe(frame);
      case 'ack':
        return this.onAck(frame);
    }
  }

  private subscribe(frame: ClientFrameOf<'subscribe'>): void {
    const { faults, journal } = this.host;
    const retryAfterMs = takeSubscribeOverload(faults);
    if (retryAfterMs !== undefined)
      return this.fail('overloaded', 'the server is overloaded; retry later', retryAfterMs);
    const { consumerId, subscriptionId, filter, start } = frame;
    const hash = computeFilterHash(filter);
    const history = journal.history;
    let generation: number;
    let startPosition: number;
    if (start.mode === 'resume' || start.mode === 'rebind') {
      const claims = this.host.signer.verify(start.token);
      const refusal = this.checkToken(claims, consumerId, subscriptionId, start.mode === 'resume' ? hash : undefined);
      if (refusal === 'cursor_mismatch')
        return this.fail(
          'cursor_mismatch',
          `the ${start.mode} token does not belong to this consumer, subscription and filter`,
        );
      if (refusal) return this.resetRequired(refusal, start.token);
      const token = claims as TokenClaims;
      generation = start.mode === 'resume' ? token.generation : token.generation + 1;
      startPosition = token.position;
    } else {
      generation = this.host.issuedGeneration(consumerId, subscriptionId) + 1;
      startPosition = start.mode === 'live_cut' ? history.head : history.floor - 1;
    }
    this.host.recordGeneration(consumerId, subscriptionId, generation);
    const cut = history.head;
    this.binding = { consumerId, subscriptionId, generation, filterHash: hash, matcher: compileFilter(filter), cut };
    this.scanned = startPosition;
    Object.assign(this.record, { consumerId, subscriptionId, generation, startPosition, cut });
    this.host.activate(this, consumerId, subscriptionId);
    this.state = 'replay';
    this.send({
      type: 'subscribed',
      consumerId,
      subscriptionId,
      generation,
      filterHash: hash,
      startPosition,
      cut: { position: cut },
      mappings: mappingsFor(journal.mappings, filter),
      sourceQuality: { asOf: cut, scopes: journal.qualityAt(cut) },
    });
    this.host.report('subscription', {
      connectionId: this.connectionId,
      consumerId,
      subscriptionId,
      generation,
      filterHash: hash,
      startPosition,
      cut,
      mode: start.mode,
    });
    void this.pump();
  }

  /** Why a token cannot be served, or undefined when it can. `filterHash` undefined: a rebind (new filter). */
  private checkToken(
    claims: TokenClaims | undefined,
    consumerId: string,
    subscriptionId: string,
    filterHash: string | undefined,
  ): 'cursor_mismatch' | ResetReason | undefined {
    if (
      !claims ||
      claims.consumerId !== consumerId ||
      claims.subscriptionId !== subscriptionId ||
      claims.generation < 1
    )
      return 'cursor_mismatch';
    const history = this.host.journal.history;
    if (claims.historyId !== history.id) return 'history_rebuilt';
    if (filterHash !== undefined && claims.filterHash !== filterHash) return 'cursor_mismatch';
    if (claims.position > history.head) return 'cursor_mismatch';
    // A token at p needs p+1.. retained: positions below the floor are gone.
    if (claims.position < history.floor - 1) return 'cursor_expired';
    return undefined;
  }

  private onAck(frame: ClientFrameOf<'ack'>): void {
    const binding = this.binding;
    const base: AckRecord = {
      connectionId: this.connectionId,
      consumerId: binding?.consumerId ?? '',
      subscriptionId: binding?.subscriptionId ?? '',
      generation: frame.generation,
      position: frame.position,
      token: frame.token,
      at: new Date(),
    };
    const reject = (reason: AckRejection): void => this.host.report('rejectedAck', { ...base, reason });
    if (!binding) {
      reject('not_subscribed');
      return this.fail('protocol_violation', 'ack before subscribe');
    }
    if (frame.connectionId !== this.connectionId) {
      reject('wrong_connection');
      return this.fail('protocol_violation', 'ack names another connection');
    }
    if (frame.generation !== binding.generation) {
      reject('stale_generation');
      return this.fail(
        'stale_generation',
        `ack names generation ${frame.generation}; the active generation is ${binding.generation}`,
      );
    }
    const sent = this.sentCheckpoints.get(frame.token);
    if (!sent || sent.position !== frame.position) {
      reject('unknown_checkpoint');
      return this.fail(
        'protocol_violation',
        `ack at position ${frame.position} does not match a checkpoint sent on this connection`,
      );
    }
    const fault = takeAckFault(this.host.faults);
    if (fault) {
      if (fault === 'lose') return reject('fault_lost');
      reject('fault_refused');
      return this.fail(
        'overloaded',
        'the acknowledgement could not be recorded; resume from your committed checkpoint',
        0,
      );
    }
    // ACKs are cumulative: a checkpoint acknowledges every earlier one of this connection.
    this.ackedCount = Math.max(this.ackedCount, sent.index + 1);
    this.host.report('ack', base);
    if (this.slowTimer) clearTimeout(this.slowTimer);
    this.slowTimer = undefined;
    void this.pump();
  }

  private unacked(): number {
    return this.checkpointCount - this.ackedCount;
  }

  /** Sends what is due, in journal order, while the socket keeps up and the ACK window is open. */
  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    // Frames written while corked leave in one write when uncorked: a syscall per burst, not per frame.
    this.socket.cork();
    try {
      // A connection whose close has begun (either side) sends nothing more: its sends would only fail.
      while ((this.state === 'replay' || this.state === 'live') && this.ws.readyState === this.ws.OPEN) {
        if (this.unacked() >= this.host.settings.maxUnackedCheckpoints) {
          this.armSlowConsumer();
          return;
        }
        if (this.pendingSends >= SEND_HIGH_WATER) {
          this.socket.uncork();
          await new Promise<void>((resolve) => this.drainWaiters.push(resolve));
          // Writes the kernel takes at once complete on the next tick, so without this the loop would run from
          // tick to tick and read nothing until the window filled: ACKs and the client's close would wait for it.
          await new Promise<void>((resolve) => setImmediate(resolve));
          this.socket.cork();
          continue;
        }
        if (!this.step()) return;
      }
    } finally {
      this.socket.uncork();
      this.pumping = false;
    }
  }

  /** Sends the next frames due; false when nothing is due. */
  private step(): boolean {
    const binding = this.binding as ActiveBinding;
    const journal = this.host.journal;
    if (this.state === 'replay') {
      const next = journal.at(journal.indexAfter(this.scanned));
      if (next && next.position <= binding.cut) {
        this.deliver(next, 'replay');
        return true;
      }
      // Replay always ends with a checkpoint at the cut, even when nothing in the range matched.
      if (this.lastCheckpointPosition !== binding.cut) this.checkpoint(binding.cut);
      this.scanned = Math.max(this.scanned, binding.cut);
      this.send({ type: 'caught_up', generation: binding.generation, cut: caughtUpCut(this.host.faults, binding.cut) });
      if (this.state === 'replay') this.state = 'live';
      return true;
    }
    if (this.liveCheckpointDue) {
      this.liveCheckpointDue = false;
      if (this.transitionsSinceCheckpoint > 0) this.checkpoint(this.scanned);
      return true;
    }
    const next = journal.at(journal.indexAfter(this.scanned));
    if (!next) return false;
    this.deliver(next, 'live');
    return true;
  }

  private deliver(transition: Transition, mode: DeliveryMode): void {
    const binding = this.binding as ActiveBinding;
    const { settings } = this.host;
    const matched = transition.events.filter(binding.matcher);
    if (matched.length > 0) {
      this.batchesSinceCheckpoint += 1;
      this.send({
        type: 'batch',
        generation: binding.generation,
        position: transition.position,
        deliveryMode: mode,
        sourceEventCount: transition.events.length,
        matchedEventCount: matched.length,
        events: applyEventFaults(this.host.faults, transition.position, matched, {
          earlierMatchedEvent: () => this.earlierMatchedEvent(transition.position),
          maxFrameBytes: settings.maxFrameBytes,
        }),
      });
    }
    for (const q of transition.quality) {
      this.send({
        type: 'quality',
        generation: binding.generation,
        position: transition.position,
        scope: q.scope,
        state: q.state,
        deliveryMode: mode,
      });
    }
    this.scanned = transition.position;
    this.transitionsSinceCheckpoint += 1;
    const every = mode === 'replay' ? settings.checkpointEvery : settings.liveCheckpointEvery;
    if (this.transitionsSinceCheckpoint >= every) this.checkpoint(transition.position);
    else if (mode === 'live') this.armLiveCheckpoint();
    if (this.state !== 'closed' && takeDropAtPosition(this.host.faults, transition.position)) this.dropAfterFlush();
  }

  /**
   * The nearest event before `position` that this connection's filter delivers (a conflict needs one the client saw).
   */
  private earlierMatchedEvent(position: number): JournalEvent | undefined {
    const binding = this.binding as ActiveBinding;
    const journal = this.host.journal;
    for (let i = journal.indexAfter(position - 1) - 1; i >= 0; i--) {
      const match = (journal.at(i) as Transition).events.find(binding.matcher);
      if (match) return match;
    }
    return undefined;
  }

  private checkpoint(position: number): void {
    const binding = this.binding as ActiveBinding;
    const token = this.host.signer.sign({
      historyId: this.host.journal.historyId,
      consumerId: binding.consumerId,
      subscriptionId: binding.subscriptionId,
      generation: binding.generation,
      filterHash: binding.filterHash,
      position,
    });
    this.send({
      type: 'checkpoint',
      generation: binding.generation,
      position,
      token,
      batchCount: this.batchesSinceCheckpoint,
    });
    this.sentCheckpoints.set(token, { position, index: this.checkpointCount });
    this.checkpointCount += 1;
    this.lastCheckpointPosition = position;
    this.batchesSinceCheckpoint = 0;
    this.transitionsSinceCheckpoint = 0;
    if (this.liveTimer) clearTimeout(this.liveTimer);
    this.liveTimer = undefined;
  }

  private armLiveCheckpoint(): void {
    if (this.liveTimer) return;
    this.liveTimer = setTimeout(() => {
      this.liveTimer = undefined;
      this.liveCheckpointDue = true;
      void this.pump();
    }, this.host.settings.liveCheckpointIntervalMs);
  }

  private armSlowConsumer(): void {
    if (this.slowTimer) return;
    this.slowTimer = setTimeout(() => {
      this.slowTimer = undefined;
      if (this.unacked() >= this.host.settings.maxUnackedCheckpoints) {
        this.fail(
          'slow_consumer',
          `${this.unacked()} checkpoints are unacknowledged; the window is ${this.host.settings.maxUnackedCheckpoints}`,
        );
      }
    }, this.host.settings.slowConsumerGraceMs);
  }

  private send(frame: UnsequencedFrame): void {
    if (this.state === 'closed' || this.ws.readyState !== this.ws.OPEN) return;
    this.sequence += 1;
    this.framesBuilt += 1;
    let frameSequence = this.sequence;
    const fault = takeFrameSequenceFault(this.host.faults, this.framesBuilt);
    let hold = false;
    if (fault) {
      if (fault === 'duplicate') {
        frameSequence -= 1;
        this.sequence -= 1;
      } else if (fault === 'skip') {
        frameSequence += 1;
        this.sequence += 1;
      } else {
        hold = true; // reorder: this frame goes out after the next one
      }
    }
    const text = encodeServerFrame({ ...frame, frameSequence });
    if (hold) {
      this.heldFrame = text;
      return;
    }
    this.write(text);
    if (this.heldFrame !== undefined) {
      const held = this.heldFrame;
      this.heldFrame = undefined;
      this.write(held);
    }
  }

  private write(text: string): void {
    this.pendingSends += 1;
    this.framesSent += 1;
    this.ws.send(text, () => {
      this.pendingSends -= 1;
      if (this.pendingSends === 0 || (this.state !== 'closed' && this.pendingSends < SEND_HIGH_WATER / 2))
        this.releaseDrainWaiters();
    });
    if (takeDropAfterFrames(this.host.faults, this.framesSent)) this.dropAfterFlush();
  }

  private releaseDrainWaiters(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const resolve of waiters) resolve();
  }

  private fail(code: ErrorCode, message: string, retryAfterMs?: number): void {
    const retryable = code === 'overloaded' || code === 'slow_consumer';
    this.send({ type: 'error', code, retryable, message, ...(retryAfterMs !== undefined ? { retryAfterMs } : {}) });
    this.closeWith(retryable ? 1013 : 1008, code);
  }

  private resetRequired(reason: ResetReason, token: string): void {
    this.send({ type: 'reset_required', reason, token, history: this.host.journal.history });
    this.closeWith(1000, 'reset_required');
  }

  /** After this the connection sends nothing more; queued frames still reach the client before the close. */
  private closeWith(code: number, reason: string): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.clearTimers();
    this.ws.close(code, reason);
  }

  private clearTimers(): void {
    if (this.liveTimer) clearTimeout(this.liveTimer);
    if (this.slowTimer) clearTimeout(this.slowTimer);
    this.liveTimer = undefined;
    this.slowTimer = undefined;
  }
}

function rawText(data: RawData): string {
  return Array.isArray(data) ? Buffer.concat(data).toString('utf8') : Buffer.from(data as ArrayBuffer).toString('utf8');
}
