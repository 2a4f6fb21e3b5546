// The reference Whalehunt stream server: docs/protocol.md over a real WebSocket and HTTP server, backed by a
// Journal. It is how the consumer, the tests, the benchmarks and the main job meet a stream, so it follows
// the contract exactly and can break it on purpose (faults) where a test asks it to.
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import { DEFAULT_MAX_FRAME_BYTES, STREAM_PATH, pagePath, type PageError } from '../protocol/codec.js';
import type { FaultPlan } from './faults.js';
import type { Journal } from './journal.js';
import { sendJson, servePage } from './pages.js';
import {
  ServerConnection,
  type AckRecord,
  type ConnectionHost,
  type ConnectionRecord,
  type ConnectionReports,
  type ConnectionSettings,
  type RejectedAckRecord,
  type SubscriptionRecord,
} from './server-connection.js';
import { TokenSigner } from './tokens.js';

export type { FaultPlan, FrameSequenceFault, PageOverlapFault } from './faults.js';
export type {
  AckRecord,
  AckRejection,
  ConnectionRecord,
  RejectedAckRecord,
  SubscriptionRecord,
} from './server-connection.js';

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

export class ReferenceStreamServer implements ConnectionHost {
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

  /** @internal */ readonly settings: ConnectionSettings;
  /** @internal */ readonly signer: TokenSigner;
  private readonly apiKeys: readonly string[];
  private readonly openConnections = new Set<ServerConnection>();
  private readonly activeByBinding = new Map<string, ServerConnection>();
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
        for (const connection of this.openConnections) connection.onJournalAppend();
      }),
      // A rebuilt history voids every open connection: their positions mean nothing any more.
      this.journal.onRebuild(() => {
        for (const connection of this.openConnections) void connection.terminate();
      }),
    ];
    wss.on('connection', (ws, request) => this.accept(ws, request.socket));
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
      // ws re-emits the HTTP server's errors (EADDRINUSE) on the WebSocketServer, where an unheard one is thrown.
      const fail = (error: Error): void => {
        wss.close();
        reject(error);
      };
      wss.once('error', fail);
      http.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
        wss.off('error', fail);
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
    const closing = [...this.openConnections].map((c) => c.terminate());
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
   * @internal Makes `connection` the active one of its binding; the previous one is closed unless a fault keeps
   * it draining.
   */
  activate(connection: ServerConnection, consumerId: string, subscriptionId: string): void {
    const key = bindingKey(consumerId, subscriptionId);
    const previous = this.activeByBinding.get(key);
    this.activeByBinding.set(key, connection);
    if (previous && previous !== connection && !this.faults.drainOldConnections) previous.supersede();
  }

  /** @internal */ report<K extends keyof ConnectionReports>(kind: K, value: ConnectionReports[K]): void {
    const lists: { [R in keyof ConnectionReports]: Array<ConnectionReports[R]> } = {
      ack: this.acks,
      rejectedAck: this.rejectedAcks,
      subscription: this.subscriptions,
    };
    lists[kind].push(value);
    this.events.emit(kind, value);
  }

  /** @internal */ disconnected(record: ConnectionRecord): void {
    this.events.emit('disconnect', record);
  }

  private accept(ws: WebSocket, socket: Socket): void {
    this.connectionCount += 1;
    const connectionId = `conn-${this.connectionCount}-${randomBytes(4).toString('hex')}`;
    const record: ConnectionRecord = { connectionId, openedAt: new Date(), closed: false };
    const connection = new ServerConnection(this, ws, record, socket);
    this.openConnections.add(connection);
    ws.once('close', () => {
      this.openConnections.delete(connection);
      for (const [key, active] of this.activeByBinding) if (active === connection) this.activeByBinding.delete(key);
    });
    this.connections.push(record);
    this.events.emit('connection', record);
    connection.start();
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

  private handleHttp(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', this.httpUrl);
    if (req.method === 'GET' && url.pathname === pagePath(this.stream)) return servePage(this, req, url, res);
    if (url.pathname === STREAM_PATH) return; // the WebSocket upgrade path; ws answers plain requests itself
    sendJson(res, 404, {
      code: 'protocol_violation',
      message: `no such endpoint: ${req.method ?? ''} ${url.pathname}`,
    } satisfies PageError);
  }
}

function bindingKey(consumerId: string, subscriptionId: string): string {
  return `${consumerId}\u0000${subscriptionId}`;
}
