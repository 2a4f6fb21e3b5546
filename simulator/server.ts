// The reference Whalehunt stream server: PROTOCOL.md over a real WebSocket and HTTP server, backed by a
// Journal. It is how the consumer, the tests, the benchmarks and the main job meet a stream, so it follows
// the contract exactly and can break it on purpose (faults) where a test asks it to.
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import {
  DEFAULT_MAX_FRAME_BYTES,
  PAGE_QUERY,
  PROTOCOL_NAME,
  STREAM_PATH,
  apiKeyOfPageAuthorization,
  decodeClientFrame,
  encodeServerFrame,
  filterSchema,
  pagePath,
  type ClientFrameOf,
  type DeliveryMode,
  type ErrorCode,
  type Mappings,
  type PageError,
  type PageEvent,
  type PageReset,
  type PageResponse,
  type ResetReason,
  type ServerFrameBody,
  type StreamFilter,
} from '../protocol/codec.js';
import { filterHash as computeFilterHash } from '../protocol/canonical.js';
import { compareDecimal, mulDecimal, parseDecimal, type Decimal } from '../protocol/decimal.js';
import type { Journal, JournalEvent, Transition } from './journal.js';
import { TokenSigner, type TokenClaims } from './tokens.js';

/**
 * Deliberate breaches of the contract. Each entry is one-shot (cleared when it fires) unless noted;
 * tests arm them through `server.faults` at any time, `main.ts` arms them from CLI flags.
 */
export interface FaultPlan {
  /** Terminate the first connection that has sent this many frames (no close frame: a network failure). */
  dropAfterFrames?: number;
  /** Terminate a connection right after the frames of the first transition at or above this position. */
  dropAtPosition?: number;
  /** Corrupt frameSequence at the N-th frame of the next connection that reaches it. */
  frameSequence?: { mode: 'duplicate' | 'skip' | 'reorder'; atFrame: number };
  /** The next `count` otherwise valid ACKs are refused (error frame, then close) or lost (silently ignored). */
  ack?: { mode: 'refuse' | 'lose'; count: number };
  /** The next `count` subscribes get `error overloaded`. */
  overloadSubscribes?: { count: number; retryAfterMs: number };
  /** Persistent: an old connection of the same consumer+subscription keeps delivering after a new one subscribes. */
  drainOldConnections?: boolean;
  /** The first batch at or above this position reuses the eventId of an earlier delivered event (a conflict). */
  conflictingEventAt?: number;
  /** The first batch at or above this position carries an event of an unknown kind. */
  unknownKindAt?: number;
  /** The first batch at or above this position is padded beyond maxFrameBytes. */
  oversizeFrameAt?: number;
  /** The next page re-includes the events of this many transitions before its cursor. */
  pageOverlap?: number;
  /** The next page answers `next` equal to its request cursor. */
  pageNonAdvancing?: boolean;
  /** The next page request answers 410 cursor_expired whatever its cursor. */
  pageExpired?: boolean;
}

export interface ReferenceServerOptions {
  journal: Journal;
  apiKeys: readonly string[];
  port?: number;
  host?: string;
  stream?: string;
  /** A replay checkpoint after this many scanned transitions (matched or not). */
  checkpointEvery?: number;
  /** A live checkpoint after this many live transitions... */
  liveCheckpointEvery?: number;
  /** ...or this long after the first live transition not yet covered by a checkpoint. */
  liveCheckpointIntervalMs?: number;
  /** Delivery pauses while this many checkpoints are unacknowledged... */
  maxUnackedCheckpoints?: number;
  /** ...and the connection fails with `slow_consumer` when the window stays full this long. */
  slowConsumerGraceMs?: number;
  tokenSecret?: string;
  /** Generated transitions per second appended to the journal while the server runs (0: none). */
  liveAppendRate?: number;
  maxFrameBytes?: number;
  faults?: FaultPlan;
}

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

/** What every frame builder produces: the codec adds `v`, the session adds `frameSequence`. */
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
type UnsequencedFrame = DistributiveOmit<ServerFrameBody, 'frameSequence'>;

const SEND_HIGH_WATER = 256;
const PAGE_SCAN_LIMIT = 5000;

export class ReferenceStreamServer {
  readonly acks: AckRecord[] = [];
  readonly rejectedAcks: RejectedAckRecord[] = [];
  readonly connections: ConnectionRecord[] = [];
  readonly subscriptions: SubscriptionRecord[] = [];
  /** Emits 'ack', 'rejectedAck', 'connection', 'subscription', 'disconnect' with the records above. */
  readonly events = new EventEmitter();
  readonly faults: FaultPlan;
  readonly journal: Journal;
  readonly stream: string;
  readonly url: string;
  readonly httpUrl: string;

  /** @internal */ readonly settings: Required<
    Omit<
      ReferenceServerOptions,
      'journal' | 'apiKeys' | 'port' | 'host' | 'faults' | 'tokenSecret' | 'stream' | 'liveAppendRate'
    >
  >;
  /** @internal */ readonly signer: TokenSigner;
  private readonly apiKeys: readonly string[];
  private readonly sessions = new Set<Session>();
  private readonly activeByBinding = new Map<string, Session>();
  private readonly generations = new Map<string, number>();
  private readonly detachJournal: Array<() => void>;
  private connectionCount = 0;
  private closing: Promise<void> | undefined;

  private constructor(
    opts: ReferenceServerOptions,
    private readonly http: Server,
    private readonly wss: WebSocketServer,
  ) {
    this.journal = opts.journal;
    this.apiKeys = [...opts.apiKeys];
    this.stream = opts.stream ?? 'polymarket';
    this.faults = opts.faults ?? {};
    const checkpointEvery = opts.checkpointEvery ?? 10;
    this.settings = {
      checkpointEvery,
      liveCheckpointEvery: opts.liveCheckpointEvery ?? checkpointEvery,
      liveCheckpointIntervalMs: opts.liveCheckpointIntervalMs ?? 250,
      maxUnackedCheckpoints: opts.maxUnackedCheckpoints ?? 64,
      slowConsumerGraceMs: opts.slowConsumerGraceMs ?? 10_000,
      maxFrameBytes: opts.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES,
    };
    this.signer = new TokenSigner(opts.tokenSecret ?? randomBytes(32).toString('hex'));
    const { port } = http.address() as AddressInfo;
    this.url = `ws://127.0.0.1:${port}${STREAM_PATH}`;
    this.httpUrl = `http://127.0.0.1:${port}`;
    this.detachJournal = [
      this.journal.onAppend(() => {
        for (const session of this.sessions) session.onJournalAppend();
      }),
      // A rebuilt history voids every open session: their positions mean nothing any more.
      this.journal.onRebuild(() => {
        for (const session of this.sessions) void session.terminate();
      }),
    ];
    wss.on('connection', (ws) => this.accept(ws));
    http.on('request', (req, res) => this.handleHttp(req, res));
    if (opts.liveAppendRate && opts.liveAppendRate > 0) this.journal.startLiveAppends(opts.liveAppendRate);
  }

  static async start(opts: ReferenceServerOptions): Promise<ReferenceStreamServer> {
    if (opts.apiKeys.length === 0) throw new Error('ReferenceStreamServer: at least one API key is required');
    const http = createServer();
    const maxFrameBytes = opts.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    // ws itself only guards memory; frames between maxFrameBytes and this bound get a protocol_violation.
    const wss = new WebSocketServer({ server: http, path: STREAM_PATH, maxPayload: maxFrameBytes * 4 });
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
        http.off('error', reject);
        resolve();
      });
    });
    return new ReferenceStreamServer(opts, http, wss);
  }

  /** Closes every socket and both servers; resolves when everything is closed. */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    this.journal.stopLiveAppends();
    for (const detach of this.detachJournal) detach();
    const closing = [...this.sessions].map((s) => s.terminate());
    await Promise.all(closing);
    await new Promise<void>((resolve) => this.wss.close(() => resolve()));
    this.http.closeAllConnections();
    await new Promise<void>((resolve, reject) => this.http.close((err) => (err ? reject(err) : resolve())));
  }

  waitForAck(pred: (ack: AckRecord) => boolean = () => true): Promise<AckRecord> {
    return this.waitFor(this.acks, 'ack', pred);
  }
  waitForRejectedAck(pred: (ack: RejectedAckRecord) => boolean = () => true): Promise<RejectedAckRecord> {
    return this.waitFor(this.rejectedAcks, 'rejectedAck', pred);
  }
  waitForSubscription(pred: (s: SubscriptionRecord) => boolean = () => true): Promise<SubscriptionRecord> {
    return this.waitFor(this.subscriptions, 'subscription', pred);
  }
  /** Resolves with the `count`-th connection (1-based) once it has been accepted. */
  waitForConnection(count = 1): Promise<ConnectionRecord> {
    return this.waitFor(this.connections, 'connection', (_c, index) => index === count - 1);
  }
  waitForDisconnect(connectionId: string): Promise<ConnectionRecord> {
    return this.waitFor(this.connections, 'disconnect', (c) => c.connectionId === connectionId && c.closed);
  }

  /** Highest generation issued to a consumer's subscription (0 if none). */
  issuedGeneration(consumerId: string, subscriptionId: string): number {
    return this.generations.get(bindingKey(consumerId, subscriptionId)) ?? 0;
  }

  /** @internal */ checkApiKey(key: string): string | undefined {
    const index = this.apiKeys.indexOf(key);
    return index < 0 ? undefined : `api-key-${index + 1}`;
  }

  /** @internal */ recordGeneration(consumerId: string, subscriptionId: string, generation: number): void {
    const key = bindingKey(consumerId, subscriptionId);
    this.generations.set(key, Math.max(this.generations.get(key) ?? 0, generation));
  }

  /**
   * @internal Makes `session` the active one of its binding; the previous one is closed unless a fault keeps it
   * draining.
   */
  activate(session: Session, consumerId: string, subscriptionId: string): void {
    const key = bindingKey(consumerId, subscriptionId);
    const previous = this.activeByBinding.get(key);
    this.activeByBinding.set(key, session);
    if (previous && previous !== session && !this.faults.drainOldConnections) previous.supersede();
  }

  /** @internal */ record<K extends 'ack' | 'rejectedAck' | 'subscription'>(
    kind: K,
    value: K extends 'ack' ? AckRecord : K extends 'rejectedAck' ? RejectedAckRecord : SubscriptionRecord,
  ): void {
    if (kind === 'ack') this.acks.push(value as AckRecord);
    else if (kind === 'rejectedAck') this.rejectedAcks.push(value as RejectedAckRecord);
    else this.subscriptions.push(value as SubscriptionRecord);
    this.events.emit(kind, value);
  }

  /** @internal */ connectionChanged(record: ConnectionRecord, event: 'disconnect' | 'update'): void {
    if (event === 'disconnect') this.events.emit('disconnect', record);
  }

  private accept(ws: WebSocket): void {
    this.connectionCount += 1;
    const connectionId = `conn-${this.connectionCount}-${randomBytes(4).toString('hex')}`;
    const record: ConnectionRecord = { connectionId, openedAt: new Date(), closed: false };
    const session = new Session(this, ws, record);
    this.sessions.add(session);
    ws.once('close', () => {
      this.sessions.delete(session);
      for (const [key, active] of this.activeByBinding) if (active === session) this.activeByBinding.delete(key);
    });
    this.connections.push(record);
    this.events.emit('connection', record);
    session.start();
  }

  private waitFor<T>(list: readonly T[], event: string, pred: (item: T, index: number) => boolean): Promise<T> {
    const index = list.findIndex(pred);
    if (index >= 0) return Promise.resolve(list[index] as T);
    return new Promise((resolve) => {
      const listener = (): void => {
        const i = list.findIndex(pred);
        if (i < 0) return;
        this.events.off(event, listener);
        resolve(list[i] as T);
      };
      this.events.on(event, listener);
    });
  }

  // ---- Section 8: pages ----

  private handleHttp(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', this.httpUrl);
    if (req.method !== 'GET' || url.pathname !== pagePath(this.stream)) {
      if (url.pathname === STREAM_PATH) return; // the WebSocket upgrade path; ws answers plain requests itself
      sendJson(res, 404, {
        code: 'protocol_violation',
        message: `no such endpoint: ${req.method ?? ''} ${url.pathname}`,
      } satisfies PageError);
      return;
    }
    if (!this.checkApiKey(apiKeyOfPageAuthorization(req.headers.authorization))) {
      sendJson(res, 401, { code: 'unauthorized', message: 'missing or unknown API key' } satisfies PageError);
      return;
    }
    const limitText = url.searchParams.get(PAGE_QUERY.limit) ?? '100';
    const limit = Number(limitText);
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) {
      sendJson(res, 400, {
        code: 'protocol_violation',
        message: 'limit must be an integer within 1..10000',
      } satisfies PageError);
      return;
    }
    let filter: StreamFilter = {};
    const filterText = url.searchParams.get(PAGE_QUERY.filter);
    if (filterText !== null) {
      let json: unknown;
      try {
        json = JSON.parse(filterText);
      } catch {
        json = undefined;
      }
      const parsed = filterSchema.safeParse(json);
      if (!parsed.success) {
        sendJson(res, 400, {
          code: 'protocol_violation',
          message: 'filter must be a filter object as canonical JSON',
        } satisfies PageError);
        return;
      }
      filter = parsed.data;
    }
    const hash = computeFilterHash(filter);
    const history = this.journal.history;
    const cursor = url.searchParams.get(PAGE_QUERY.cursor);
    let after = history.floor - 1;
    if (cursor !== null) {
      const claims = this.signer.verify(cursor);
      if (!claims || claims.consumerId !== '' || claims.subscriptionId !== '') {
        sendJson(res, 409, {
          code: 'cursor_mismatch',
          message: 'the cursor is not a page cursor of this server',
        } satisfies PageError);
        return;
      }
      if (claims.historyId !== history.id) {
        sendJson(res, 410, { reason: 'history_rebuilt', token: cursor, history } satisfies PageReset);
        return;
      }
      if (claims.filterHash !== hash || claims.position > history.head) {
        sendJson(res, 409, {
          code: 'cursor_mismatch',
          message: 'the cursor belongs to another filter',
        } satisfies PageError);
        return;
      }
      if (claims.position < history.floor - 1) {
        sendJson(res, 410, { reason: 'cursor_expired', token: cursor, history } satisfies PageReset);
        return;
      }
      after = claims.position;
    }
    if (this.faults.pageExpired) {
      this.faults.pageExpired = undefined;
      sendJson(res, 410, { reason: 'cursor_expired', token: cursor ?? '', history } satisfies PageReset);
      return;
    }
    const matcher = compileFilter(filter);
    const toPageEvents = (t: Transition): PageEvent[] =>
      t.events.filter(matcher).map((e) => ({ position: t.position, ...e }));
    const events: PageEvent[] = [];
    if (this.faults.pageOverlap) {
      // A retried page that starts before its cursor: the reader must recognise these as already applied.
      let remaining = this.faults.pageOverlap;
      this.faults.pageOverlap = undefined;
      const earlier: PageEvent[][] = [];
      for (let i = this.journal.indexAfter(after) - 1; i >= 0 && remaining > 0; i--) {
        const page = toPageEvents(this.journal.at(i) as Transition);
        if (page.length === 0) continue;
        earlier.unshift(page);
        remaining -= 1;
      }
      events.push(...earlier.flat());
    }
    let end = after;
    let scanned = 0;
    for (const t of this.journal.range(after, history.head)) {
      if (events.length >= limit || scanned >= PAGE_SCAN_LIMIT) break;
      events.push(...toPageEvents(t));
      end = t.position;
      scanned += 1;
    }
    let next = this.signer.sign({
      historyId: history.id,
      consumerId: '',
      subscriptionId: '',
      generation: 0,
      filterHash: hash,
      position: end,
    });
    if (this.faults.pageNonAdvancing && cursor !== null) {
      this.faults.pageNonAdvancing = undefined;
      next = cursor;
    }
    sendJson(res, 200, { events, next, history } satisfies PageResponse);
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function rawText(data: RawData): string {
  return Array.isArray(data) ? Buffer.concat(data).toString('utf8') : Buffer.from(data as ArrayBuffer).toString('utf8');
}

function bindingKey(consumerId: string, subscriptionId: string): string {
  return `${consumerId}\u0000${subscriptionId}`;
}

/** The filter as a predicate over journal events (all parts optional, AND-ed). */
export function compileFilter(filter: StreamFilter): (event: JournalEvent) => boolean {
  const kinds = filter.kinds ? new Set(filter.kinds) : undefined;
  const markets = filter.markets ? new Set(filter.markets) : undefined;
  const wallets = filter.wallets ? new Set(filter.wallets) : undefined;
  const minNotional: Decimal | undefined =
    filter.minNotional !== undefined ? parseDecimal(filter.minNotional) : undefined;
  return (event) => {
    if (kinds && !kinds.has(event.kind)) return false;
    if (markets && !markets.has(String(event.data.market))) return false;
    if (wallets && !wallets.has(String(event.data.wallet))) return false;
    if (minNotional) {
      const { price, size } = event.data;
      if (typeof price !== 'string' || typeof size !== 'string') return false;
      let value: Decimal;
      try {
        value = mulDecimal(parseDecimal(price), parseDecimal(size));
      } catch {
        return false;
      }
      if (compareDecimal(value, minNotional) < 0) return false;
    }
    return true;
  };
}

function mappingsFor(all: Mappings, filter: StreamFilter): Mappings {
  if (!filter.markets) return { ...all };
  const markets = new Set(filter.markets);
  return Object.fromEntries(Object.entries(all).filter(([, m]) => markets.has(m.market)));
}

interface ActiveBinding {
  consumerId: string;
  subscriptionId: string;
  generation: number;
  filterHash: string;
  matcher: (event: JournalEvent) => boolean;
  cut: number;
}

type SessionState = 'awaiting_auth' | 'awaiting_subscribe' | 'replay' | 'live' | 'closed';

/** One WebSocket connection, from its hello to its close. */
class Session {
  private state: SessionState = 'awaiting_auth';
  private sequence = 0;
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
    private readonly server: ReferenceStreamServer,
    private readonly ws: WebSocket,
    private readonly record: ConnectionRecord,
  ) {
    this.closed = new Promise((resolve) => ws.once('close', () => resolve()));
    ws.on('close', () => {
      this.state = 'closed';
      this.clearTimers();
      this.record.closed = true;
      this.releaseDrainWaiters();
      this.server.connectionChanged(this.record, 'disconnect');
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
      stream: this.server.stream,
      history: this.server.journal.history,
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
        maxFrameBytes: this.server.settings.maxFrameBytes,
      });
    } catch (err) {
      this.fail('protocol_violation', err instanceof Error ? err.message : 'undecodable frame');
      return;
    }
    switch (frame.type) {
      case 'authenticate': {
        if (this.state !== 'awaiting_auth')
          return this.fail('protocol_violation', 'authenticate is only valid once, right after hello');
        const principal = this.server.checkApiKey(frame.apiKey);
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
    const { faults, journal } = this.server;
    if (faults.overloadSubscribes && faults.overloadSubscribes.count > 0) {
      const { retryAfterMs } = faults.overloadSubscribes;
      faults.overloadSubscribes.count -= 1;
      if (faults.overloadSubscribes.count === 0) faults.overloadSubscribes = undefined;
      return this.fail('overloaded', 'the server is overloaded; retry later', retryAfterMs);
    }
    const { consumerId, subscriptionId, filter, start } = frame;
    const hash = computeFilterHash(filter);
    const history = journal.history;
    let generation: number;
    let startPosition: number;
    if (start.mode === 'resume' || start.mode === 'rebind') {
      const claims = this.server.signer.verify(start.token);
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
      generation = this.server.issuedGeneration(consumerId, subscriptionId) + 1;
      startPosition = start.mode === 'live_cut' ? history.head : history.floor - 1;
    }
    this.server.recordGeneration(consumerId, subscriptionId, generation);
    const cut = history.head;
    this.binding = { consumerId, subscriptionId, generation, filterHash: hash, matcher: compileFilter(filter), cut };
    this.scanned = startPosition;
    Object.assign(this.record, { consumerId, subscriptionId, generation, startPosition, cut });
    this.server.activate(this, consumerId, subscriptionId);
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
    this.server.record('subscription', {
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
    const history = this.server.journal.history;
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
    const reject = (reason: AckRejection): void => this.server.record('rejectedAck', { ...base, reason });
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
    const fault = this.server.faults.ack;
    if (fault && fault.count > 0) {
      fault.count -= 1;
      if (fault.count === 0) this.server.faults.ack = undefined;
      if (fault.mode === 'lose') return reject('fault_lost');
      reject('fault_refused');
      return this.fail(
        'overloaded',
        'the acknowledgement could not be recorded; resume from your committed checkpoint',
        0,
      );
    }
    // ACKs are cumulative: a checkpoint acknowledges every earlier one of this connection.
    this.ackedCount = Math.max(this.ackedCount, sent.index + 1);
    this.server.record('ack', base);
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
    try {
      while (this.state === 'replay' || this.state === 'live') {
        if (this.unacked() >= this.server.settings.maxUnackedCheckpoints) {
          this.armSlowConsumer();
          return;
        }
        if (this.pendingSends >= SEND_HIGH_WATER) {
          await new Promise<void>((resolve) => this.drainWaiters.push(resolve));
          continue;
        }
        if (!this.step()) return;
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Sends the next frames due; false when nothing is due. */
  private step(): boolean {
    const binding = this.binding as ActiveBinding;
    const journal = this.server.journal;
    if (this.state === 'replay') {
      const next = journal.at(journal.indexAfter(this.scanned));
      if (next && next.position <= binding.cut) {
        this.deliver(next, 'replay');
        return true;
      }
      // Replay always ends with a checkpoint at the cut, even when nothing in the range matched.
      if (this.lastCheckpointPosition !== binding.cut) this.checkpoint(binding.cut);
      this.scanned = Math.max(this.scanned, binding.cut);
      this.send({ type: 'caught_up', generation: binding.generation, cut: { position: binding.cut } });
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
    const { settings } = this.server;
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
        events: this.applyEventFaults(transition.position, matched),
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
    const dropAt = this.server.faults.dropAtPosition;
    if (dropAt !== undefined && transition.position >= dropAt && this.state !== 'closed') {
      this.server.faults.dropAtPosition = undefined;
      this.dropAfterFlush();
    }
  }

  private applyEventFaults(position: number, events: JournalEvent[]): JournalEvent[] {
    const faults = this.server.faults;
    const [first, ...rest] = events as [JournalEvent, ...JournalEvent[]];
    if (faults.conflictingEventAt !== undefined && position >= faults.conflictingEventAt) {
      const earlier = this.earlierMatchedEvent(position);
      if (earlier) {
        faults.conflictingEventAt = undefined;
        return [{ ...first, eventId: earlier.eventId }, ...rest];
      }
    }
    if (faults.unknownKindAt !== undefined && position >= faults.unknownKindAt) {
      faults.unknownKindAt = undefined;
      return [{ ...first, kind: 'market_resolution' }, ...rest];
    }
    if (faults.oversizeFrameAt !== undefined && position >= faults.oversizeFrameAt) {
      faults.oversizeFrameAt = undefined;
      return [{ ...first, data: { ...first.data, padding: 'x'.repeat(this.server.settings.maxFrameBytes) } }, ...rest];
    }
    return events;
  }

  /**
   * The nearest event before `position` that this connection's filter delivers (a conflict needs one the client saw).
   */
  private earlierMatchedEvent(position: number): JournalEvent | undefined {
    const binding = this.binding as ActiveBinding;
    const journal = this.server.journal;
    for (let i = journal.indexAfter(position - 1) - 1; i >= 0; i--) {
      const match = (journal.at(i) as Transition).events.find(binding.matcher);
      if (match) return match;
    }
    return undefined;
  }

  private checkpoint(position: number): void {
    const binding = this.binding as ActiveBinding;
    const token = this.server.signer.sign({
      historyId: this.server.journal.historyId,
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
    }, this.server.settings.liveCheckpointIntervalMs);
  }

  private armSlowConsumer(): void {
    if (this.slowTimer) return;
    this.slowTimer = setTimeout(() => {
      this.slowTimer = undefined;
      if (this.unacked() >= this.server.settings.maxUnackedCheckpoints) {
        this.fail(
          'slow_consumer',
          `${this.unacked()} checkpoints are unacknowledged; the window is ${this.server.settings.maxUnackedCheckpoints}`,
        );
      }
    }, this.server.settings.slowConsumerGraceMs);
  }

  private send(frame: UnsequencedFrame): void {
    if (this.state === 'closed' || this.ws.readyState !== this.ws.OPEN) return;
    this.sequence += 1;
    let frameSequence = this.sequence;
    const fault = this.server.faults.frameSequence;
    let hold = false;
    if (fault && fault.atFrame === this.sequence) {
      this.server.faults.frameSequence = undefined;
      if (fault.mode === 'duplicate') {
        frameSequence -= 1;
        this.sequence -= 1;
      } else if (fault.mode === 'skip') {
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
    const dropAfter = this.server.faults.dropAfterFrames;
    if (dropAfter !== undefined && this.framesSent >= dropAfter) {
      this.server.faults.dropAfterFrames = undefined;
      this.dropAfterFlush();
    }
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
    this.send({ type: 'reset_required', reason, token, history: this.server.journal.history });
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
