// Shared set-up for the simulator tests: a real server on port 0 and clients that are all closed afterwards.
import { afterEach } from 'vitest';
import type { ServerFrame, ServerFrameOf, StartRequest, StreamFilter } from '../../protocol/codec.js';
import { Journal, type GeneratorOptions } from '../../simulator/journal.js';
import { ReferenceStreamServer, type ReferenceServerOptions } from '../../simulator/server.js';
import { ScriptClient } from '../support/script-client.js';

export const API_KEY = 'test-key-3f9a';

export interface Harness {
  start(
    opts?: Partial<ReferenceServerOptions> & { generate?: Partial<GeneratorOptions> },
  ): Promise<ReferenceStreamServer>;
  connect(opts?: { maxFrameBytes?: number }): Promise<ScriptClient>;
  readonly server: ReferenceStreamServer;
}

/** Registers an afterEach that closes every client and server the test opened. */
export function useHarness(): Harness {
  let servers: ReferenceStreamServer[] = [];
  let clients: ScriptClient[] = [];
  afterEach(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all(servers.map((s) => s.close()));
    clients = [];
    servers = [];
  });
  return {
    async start(opts = {}) {
      const { generate, ...rest } = opts;
      const journal =
        rest.journal ??
        Journal.generate({ seed: 7, transitions: 45, qualityRate: 0.2, correctionRate: 0.2, ...generate });
      const server = await ReferenceStreamServer.start({
        apiKeys: [API_KEY],
        tokenSecret: 'test-secret',
        ...rest,
        journal,
      });
      servers.push(server);
      return server;
    },
    async connect(opts = {}) {
      const server = servers.at(-1);
      if (!server) throw new Error('start a server first');
      const client = await ScriptClient.connect(server.url, opts);
      clients.push(client);
      return client;
    },
    get server() {
      const server = servers.at(-1);
      if (!server) throw new Error('start a server first');
      return server;
    },
  };
}

export interface Subscription {
  client: ScriptClient;
  hello: ServerFrameOf<'hello'>;
  subscribed: ServerFrameOf<'subscribed'>;
}

export async function subscribe(
  h: Harness,
  request: { consumerId?: string; subscriptionId?: string; filter?: StreamFilter; start: StartRequest },
): Promise<Subscription> {
  const client = await h.connect();
  const { hello, subscribed } = await client.handshake(API_KEY, {
    consumerId: request.consumerId ?? 'consumer-a',
    subscriptionId: request.subscriptionId ?? 'sub-1',
    filter: request.filter ?? {},
    start: request.start,
  });
  return { client, hello, subscribed };
}

/** Frames after `subscribed` up to and including `caught_up`. */
export function replayFrames(client: ScriptClient): Promise<ServerFrame[]> {
  return client.collectUntil((f) => f.type === 'caught_up');
}

export function ofType<T extends ServerFrame['type']>(frames: ServerFrame[], type: T): Array<ServerFrameOf<T>> {
  return frames.filter((f): f is ServerFrameOf<T> => f.type === type);
}
