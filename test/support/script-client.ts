// A scripted WebSocket client for tests: send client frames through the codec, await server frames one by
// one. Every wait resolves on an event (a frame arrives, the socket closes), never on a timer.
import WebSocket from 'ws';
import {
  WireError,
  decodeServerFrame,
  encodeClientFrame,
  type ClientFrameBody,
  type ServerFrame,
  type ServerFrameOf,
  type StartRequest,
  type StreamFilter,
} from '../../protocol/codec.js';

export interface ReceivedFrame {
  /** The message as it came off the socket. */
  raw: string;
  /** The decoded frame, when it decodes. */
  frame?: ServerFrame;
  /** Why it does not decode (oversize, unknown frame type, invalid field...). */
  error?: WireError;
}

export interface CloseInfo {
  code: number;
  reason: string;
}

export class ScriptClientClosed extends Error {
  override readonly name = 'ScriptClientClosed';
  readonly code = 'connection_closed';
  constructor(readonly close: CloseInfo) {
    super(
      `the connection closed (${close.code}${close.reason ? ` ${close.reason}` : ''}) before the awaited frame arrived`,
    );
  }
}

export class ScriptClient {
  /** Every frame received so far, in arrival order. */
  readonly received: ReceivedFrame[] = [];
  /** Resolves when the socket has closed. */
  readonly closed: Promise<CloseInfo>;
  private readCursor = 0;
  private closeInfo: CloseInfo | undefined;
  private waiter: (() => void) | undefined;

  private constructor(
    private readonly ws: WebSocket,
    private readonly maxFrameBytes: number,
  ) {
    ws.on('message', (data: WebSocket.RawData, isBinary) => {
      const raw = Array.isArray(data)
        ? Buffer.concat(data).toString('utf8')
        : Buffer.from(data as ArrayBuffer).toString('utf8');
      try {
        this.received.push({
          raw,
          frame: decodeServerFrame(raw, { isBinary, maxFrameBytes: this.maxFrameBytes }).frame,
        });
      } catch (err) {
        if (!(err instanceof WireError)) throw err;
        this.received.push({ raw, error: err });
      }
      this.wake();
    });
    this.closed = new Promise((resolve) => {
      ws.once('close', (code, reason) => {
        this.closeInfo = { code, reason: reason.toString('utf8') };
        this.wake();
        resolve(this.closeInfo);
      });
    });
    ws.on('error', () => {
      // 'close' follows and is what waits observe.
    });
  }

  /** Opens a connection; resolves once the socket is open (the server's hello may already be queued). */
  static async connect(url: string, opts: { maxFrameBytes?: number } = {}): Promise<ScriptClient> {
    const ws = new WebSocket(url);
    const client = new ScriptClient(ws, opts.maxFrameBytes ?? 1024 * 1024);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return client;
  }

  get isClosed(): boolean {
    return this.closeInfo !== undefined;
  }

  send(frame: ClientFrameBody): void {
    this.ws.send(encodeClientFrame(frame));
  }

  /** Sends bytes as they are (malformed or binary frames for protocol-violation tests). */
  sendRaw(data: string | Buffer, opts: { binary?: boolean } = {}): void {
    this.ws.send(data, { binary: opts.binary ?? false });
  }

  /** The next message, decoded or not. Rejects with ScriptClientClosed when the socket closes first. */
  async nextReceived(): Promise<ReceivedFrame> {
    for (;;) {
      const item = this.received[this.readCursor];
      if (item) {
        this.readCursor += 1;
        return item;
      }
      if (this.closeInfo) throw new ScriptClientClosed(this.closeInfo);
      await new Promise<void>((resolve) => (this.waiter = resolve));
    }
  }

  /** The next decoded frame; a frame that does not decode rejects with its WireError. */
  async next(): Promise<ServerFrame> {
    const item = await this.nextReceived();
    if (item.error) throw item.error;
    return item.frame as ServerFrame;
  }

  /** Skips frames until one of type `type` arrives, and returns it. */
  async nextOfType<T extends ServerFrame['type']>(type: T): Promise<ServerFrameOf<T>> {
    for (;;) {
      const frame = await this.next();
      if (frame.type === type) return frame as ServerFrameOf<T>;
    }
  }

  /** The next frame, which must be of type `type` (anything else rejects, naming what came instead). */
  async expect<T extends ServerFrame['type']>(type: T): Promise<ServerFrameOf<T>> {
    const frame = await this.next();
    if (frame.type !== type) throw new Error(`expected a ${type} frame, got ${frame.type}: ${JSON.stringify(frame)}`);
    return frame as ServerFrameOf<T>;
  }

  /** Collects decoded frames until (and including) the first one for which `stop` is true. */
  async collectUntil(stop: (frame: ServerFrame) => boolean): Promise<ServerFrame[]> {
    const frames: ServerFrame[] = [];
    for (;;) {
      const frame = await this.next();
      frames.push(frame);
      if (stop(frame)) return frames;
    }
  }

  /** Every remaining frame until the server closes the connection. */
  async drainUntilClosed(): Promise<ReceivedFrame[]> {
    const rest: ReceivedFrame[] = [];
    for (;;) {
      try {
        rest.push(await this.nextReceived());
      } catch (err) {
        if (err instanceof ScriptClientClosed) return rest;
        throw err;
      }
    }
  }

  /** hello → authenticate → authenticated. */
  async authenticate(
    apiKey: string,
  ): Promise<{ hello: ServerFrameOf<'hello'>; authenticated: ServerFrameOf<'authenticated'> }> {
    const hello = await this.expect('hello');
    this.send({ type: 'authenticate', apiKey });
    const authenticated = await this.expect('authenticated');
    return { hello, authenticated };
  }

  subscribe(request: { consumerId: string; subscriptionId: string; filter?: StreamFilter; start: StartRequest }): void {
    this.send({
      type: 'subscribe',
      consumerId: request.consumerId,
      subscriptionId: request.subscriptionId,
      filter: request.filter ?? {},
      start: request.start,
    });
  }

  /** hello → authenticated → subscribed, in one call. */
  async handshake(
    apiKey: string,
    request: { consumerId: string; subscriptionId: string; filter?: StreamFilter; start: StartRequest },
  ): Promise<{
    hello: ServerFrameOf<'hello'>;
    subscribed: ServerFrameOf<'subscribed'>;
  }> {
    const { hello } = await this.authenticate(apiKey);
    this.subscribe(request);
    const subscribed = await this.expect('subscribed');
    return { hello, subscribed };
  }

  /** ACKs a checkpoint received on this connection. */
  ack(connectionId: string, checkpoint: Pick<ServerFrameOf<'checkpoint'>, 'generation' | 'position' | 'token'>): void {
    this.send({
      type: 'ack',
      connectionId,
      generation: checkpoint.generation,
      position: checkpoint.position,
      token: checkpoint.token,
    });
  }

  /** Closes the socket and resolves once it is closed. */
  async close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CONNECTING || this.ws.readyState === WebSocket.OPEN)
      this.ws.close(1000, 'test done');
    if (this.ws.readyState !== WebSocket.CLOSED) await this.closed;
  }

  /** Drops the socket without a close handshake. */
  terminate(): Promise<CloseInfo> {
    this.ws.terminate();
    return this.closed;
  }

  private wake(): void {
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.();
  }
}
