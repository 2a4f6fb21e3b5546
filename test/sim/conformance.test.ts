// The reference server against docs/protocol.md: handshake, every start mode, replay → checkpoint at the cut →
// caught_up → live, filters, token binding, generations, ACK validation and the error codes.
import { describe, expect, it } from 'vitest';
import { PROTOCOL_NAME, type ServerFrame, type StreamFilter } from '../../protocol/codec.js';
import { filterHash } from '../../protocol/canonical.js';
import { compareDecimal, notional, parseDecimal } from '../../protocol/decimal.js';
import type { JournalEvent } from '../../simulator/journal-types.js';
import type { ScriptClient } from '../support/script-client.js';
import { API_KEY, ofType, replayFrames, subscribe, useHarness } from './harness.js';

const h = useHarness();

function journalEvents(
  filter: (e: JournalEvent) => boolean = () => true,
): Array<{ position: number; eventId: string }> {
  const out: Array<{ position: number; eventId: string }> = [];
  for (const t of h.server.journal.range(0, h.server.journal.head)) {
    for (const e of t.events) if (filter(e)) out.push({ position: t.position, eventId: e.eventId });
  }
  return out;
}

function deliveredEvents(frames: ServerFrame[]): Array<{ position: number; eventId: string }> {
  return ofType(frames, 'batch').flatMap((b) => b.events.map((e) => ({ position: b.position, eventId: e.eventId })));
}

describe('handshake', () => {
  it('opens with hello at frameSequence 1 carrying the history, then authenticates', async () => {
    const server = await h.start();
    const client = await h.connect();
    const { hello, authenticated } = await client.authenticate(API_KEY);
    expect(hello).toMatchObject({
      frameSequence: 1,
      protocol: PROTOCOL_NAME,
      stream: 'polymarket',
      history: server.journal.history,
    });
    expect(hello.history).toEqual({ id: 'hist-7', floor: 1, head: 45 });
    expect(authenticated.frameSequence).toBe(2);
    expect(authenticated.principal).not.toContain(API_KEY);
  });

  it('refuses a wrong API key with a non-retryable unauthorized error, without echoing the key, and closes', async () => {
    await h.start();
    const client = await h.connect();
    await client.expect('hello');
    client.send({ type: 'authenticate', apiKey: 'wrong-secret-key' });
    const error = await client.expect('error');
    expect(error).toMatchObject({ code: 'unauthorized', retryable: false });
    expect(error.message).not.toContain('wrong-secret-key');
    expect(await client.drainUntilClosed()).toEqual([]);
  });

  it('numbers every server frame +1 on a connection, control frames included', async () => {
    await h.start();
    const { client, hello, subscribed } = await subscribe(h, { start: { mode: 'from_floor' } });
    const frames = [hello, subscribed, ...(await replayFrames(client))];
    expect(frames.map((f) => f.frameSequence)).toEqual(frames.map((_, i) => (i === 0 ? 1 : i + 2)));
    // authenticated was frame 2
    expect(subscribed.frameSequence).toBe(3);
  });
});

describe('from_floor replay', () => {
  it('binds the subscription and replays every event in journal order up to a checkpoint at the cut', async () => {
    const server = await h.start({ checkpointEvery: 10 });
    const journal = server.journal;
    const { client, subscribed } = await subscribe(h, { start: { mode: 'from_floor' } });
    expect(subscribed).toMatchObject({
      consumerId: 'consumer-a',
      subscriptionId: 'sub-1',
      generation: 1,
      filterHash: filterHash({}),
      startPosition: 0,
      cut: { position: 45 },
      mappings: journal.mappings,
      sourceQuality: { asOf: 45, scopes: journal.qualityAt(45) },
    });
    const frames = await replayFrames(client);
    expect(deliveredEvents(frames)).toEqual(journalEvents());

    for (const batch of ofType(frames, 'batch')) {
      const t = journal.transitionAt(batch.position)!;
      expect(batch).toMatchObject({
        generation: 1,
        deliveryMode: 'replay',
        sourceEventCount: t.events.length,
        matchedEventCount: batch.events.length,
      });
      expect(batch.events).toEqual(t.events);
    }
    const checkpoints = ofType(frames, 'checkpoint');
    expect(checkpoints.map((c) => c.position)).toEqual([10, 20, 30, 40, 45]);
    // batchCount = batches since the previous checkpoint
    let batches = 0;
    for (const f of frames) {
      if (f.type === 'batch') batches += 1;
      if (f.type === 'checkpoint') {
        expect(f.batchCount).toBe(batches);
        batches = 0;
      }
    }
    expect(frames.at(-2)).toMatchObject({ type: 'checkpoint', position: 45 });
    expect(frames.at(-1)).toMatchObject({ type: 'caught_up', generation: 1, cut: { position: 45 } });
  });

  it('sends quality notices at their journal positions, and the snapshot reflects them as of the cut', async () => {
    const server = await h.start();
    const { client, subscribed } = await subscribe(h, { start: { mode: 'from_floor' } });
    const frames = await replayFrames(client);
    const expected = [...server.journal.range(0, 45)].flatMap((t) =>
      t.quality.map((q) => ({ position: t.position, ...q })),
    );
    expect(expected.length).toBeGreaterThan(0);
    expect(ofType(frames, 'quality').map((q) => ({ position: q.position, scope: q.scope, state: q.state }))).toEqual(
      expected,
    );
    const last = new Map(expected.map((q) => [q.scope, q]));
    for (const scope of subscribed.sourceQuality.scopes) {
      const notice = last.get(scope.scope);
      expect(scope).toEqual(
        notice
          ? { scope: scope.scope, state: notice.state, lastPosition: notice.position }
          : { scope: scope.scope, state: 'ok', lastPosition: 0 },
      );
    }
  });

  it('checkpoints zero-match ranges too and still ends with a checkpoint at the cut', async () => {
    await h.start({ checkpointEvery: 10 });
    const { client } = await subscribe(h, { filter: { markets: ['no-such-market'] }, start: { mode: 'from_floor' } });
    const frames = await replayFrames(client);
    expect(frames.filter((f) => f.type !== 'quality').map((f) => f.type)).toEqual([
      'checkpoint',
      'checkpoint',
      'checkpoint',
      'checkpoint',
      'checkpoint',
      'caught_up',
    ]);
    const checkpoints = ofType(frames, 'checkpoint');
    expect(checkpoints.map((c) => [c.position, c.batchCount])).toEqual([
      [10, 0],
      [20, 0],
      [30, 0],
      [40, 0],
      [45, 0],
    ]);
    expect(ofType(frames, 'batch')).toEqual([]);
  });
});

describe('filters', () => {
  const atLeast5000 = (e: JournalEvent): boolean =>
    compareDecimal(parseDecimal(notional(String(e.data.price), String(e.data.size))), parseDecimal('5000')) >= 0;
  it.each(['kinds', 'markets', 'wallets', 'minNotional'] as const)(
    'delivers exactly the events matching %s, with their original ordinals',
    async (part) => {
      const server = await h.start();
      const first = server.journal.at(0)!.events[0]!;
      const cases: Record<typeof part, [StreamFilter, (e: JournalEvent) => boolean]> = {
        kinds: [{ kinds: ['correction'] }, (e) => e.kind === 'correction'],
        markets: [{ markets: [String(first.data.market)] }, (e) => e.data.market === first.data.market],
        wallets: [{ wallets: [String(first.data.wallet)] }, (e) => e.data.wallet === first.data.wallet],
        minNotional: [{ minNotional: '5000' }, atLeast5000],
      };
      const [filter, matches] = cases[part];
      const { client, subscribed } = await subscribe(h, { filter, start: { mode: 'from_floor' } });
      expect(subscribed.filterHash).toBe(filterHash(filter));
      const frames = await replayFrames(client);
      const expected = journalEvents(matches);
      expect(expected.length).toBeGreaterThan(0);
      expect(deliveredEvents(frames)).toEqual(expected);
      for (const batch of ofType(frames, 'batch')) {
        const t = server.journal.transitionAt(batch.position)!;
        expect(batch.sourceEventCount).toBe(t.events.length);
        for (const e of batch.events) expect(t.events[e.ordinal - 1]).toEqual(e);
      }
    },
  );

  it('ANDs filter parts and freezes the mappings of the filtered markets', async () => {
    const server = await h.start();
    const first = server.journal.at(0)!.events[0]!;
    const market = String(first.data.market);
    const filter = { markets: [market], kinds: ['trade'] };
    const { client, subscribed } = await subscribe(h, { filter, start: { mode: 'from_floor' } });
    expect(Object.values(subscribed.mappings).map((m) => m.market)).toEqual([market, market]);
    expect(
      Object.values(subscribed.mappings)
        .map((m) => m.outcome)
        .sort(),
    ).toEqual(['No', 'Yes']);
    const frames = await replayFrames(client);
    expect(deliveredEvents(frames)).toEqual(journalEvents((e) => e.kind === 'trade' && e.data.market === market));
  });
});

describe('live delivery', () => {
  it('live_cut starts at the head, checkpoints the empty replay, then delivers live batches and checkpoints', async () => {
    const server = await h.start({ liveCheckpointEvery: 3, liveCheckpointIntervalMs: 60_000 });
    const { client, subscribed } = await subscribe(h, { start: { mode: 'live_cut' } });
    expect(subscribed).toMatchObject({ generation: 1, startPosition: 45, cut: { position: 45 } });
    const replay = await replayFrames(client);
    expect(replay).toEqual([
      expect.objectContaining({ type: 'checkpoint', position: 45, batchCount: 0 }),
      expect.objectContaining({ type: 'caught_up', cut: { position: 45 } }),
    ]);
    for (let i = 0; i < 3; i++) server.journal.appendGenerated();
    const live = await client.collectUntil((f) => f.type === 'checkpoint');
    expect(ofType(live, 'batch').map((b) => [b.position, b.deliveryMode])).toEqual([
      [46, 'live'],
      [47, 'live'],
      [48, 'live'],
    ]);
    expect(live.at(-1)).toMatchObject({ type: 'checkpoint', position: 48, batchCount: 3 });
  });

  it('checkpoints a live transition after the interval when fewer than N arrived', async () => {
    const server = await h.start({ liveCheckpointEvery: 1000, liveCheckpointIntervalMs: 20 });
    const { client } = await subscribe(h, { start: { mode: 'live_cut' } });
    await replayFrames(client);
    server.journal.appendGenerated();
    const checkpoint = await client.nextOfType('checkpoint');
    expect(checkpoint).toMatchObject({ position: 46, batchCount: 1 });
  });

  it('appends generated transitions at the configured live rate', async () => {
    const server = await h.start({ liveAppendRate: 200, liveCheckpointEvery: 2 });
    const { client } = await subscribe(h, { start: { mode: 'from_floor' } });
    await replayFrames(client);
    const checkpoint = await client.nextOfType('checkpoint');
    expect(checkpoint.position).toBeGreaterThan(45);
    expect(server.journal.head).toBeGreaterThanOrEqual(checkpoint.position);
  });
});

describe('start modes and tokens', () => {
  async function checkpointAt(
    position: number,
    consumerId = 'consumer-a',
    filter = {},
  ): Promise<{ token: string; connectionId: string }> {
    const { client, hello } = await subscribe(h, { consumerId, filter, start: { mode: 'from_floor' } });
    const frames = await replayFrames(client);
    const checkpoint = ofType(frames, 'checkpoint').find((c) => c.position === position)!;
    await client.close();
    return { token: checkpoint.token, connectionId: hello.connectionId };
  }

  it('resume keeps the generation and delivers exactly the positions after the token', async () => {
    const server = await h.start();
    const { token } = await checkpointAt(20);
    const { client, subscribed } = await subscribe(h, { start: { mode: 'resume', token } });
    expect(subscribed).toMatchObject({ generation: 1, startPosition: 20, cut: { position: 45 } });
    const frames = await replayFrames(client);
    expect(deliveredEvents(frames)).toEqual(journalEvents().filter((e) => e.position > 20));
    expect(ofType(frames, 'checkpoint').map((c) => c.position)).toEqual([30, 40, 45]);
    expect(server.issuedGeneration('consumer-a', 'sub-1')).toBe(1);
  });

  it.each([
    ['another consumer', { consumerId: 'consumer-b' }],
    ['another subscription', { subscriptionId: 'sub-2' }],
    ['another filter', { filter: { kinds: ['trade'] } }],
  ])('refuses a resume token of %s with cursor_mismatch and closes', async (_name, change) => {
    await h.start();
    const { token } = await checkpointAt(10);
    const client = await h.connect();
    await client.authenticate(API_KEY);
    client.subscribe({
      consumerId: 'consumer-a',
      subscriptionId: 'sub-1',
      filter: {},
      start: { mode: 'resume', token },
      ...change,
    });
    expect(await client.expect('error')).toMatchObject({ code: 'cursor_mismatch', retryable: false });
    expect(await client.drainUntilClosed()).toEqual([]);
  });

  it('refuses a forged or altered token with cursor_mismatch', async () => {
    await h.start();
    const { token } = await checkpointAt(10);
    const [payload] = token.split('.');
    const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString('utf8')) as Record<string, unknown>;
    const altered = `${Buffer.from(JSON.stringify({ ...claims, p: 40 })).toString('base64url')}.${token.split('.')[1]!}`;
    for (const bad of [altered, 'not-a-token', `${token}x`]) {
      const client = await h.connect();
      await client.authenticate(API_KEY);
      client.subscribe({ consumerId: 'consumer-a', subscriptionId: 'sub-1', start: { mode: 'resume', token: bad } });
      expect(await client.expect('error')).toMatchObject({ code: 'cursor_mismatch' });
    }
  });

  it('answers reset_required cursor_expired for a token below the retention floor, keeping floor - 1 servable', async () => {
    const server = await h.start();
    const { token: at10 } = await checkpointAt(10);
    const { token: at20 } = await checkpointAt(20);
    server.journal.setRetentionFloor(21);
    const client = await h.connect();
    await client.authenticate(API_KEY);
    client.subscribe({ consumerId: 'consumer-a', subscriptionId: 'sub-1', start: { mode: 'resume', token: at10 } });
    const reset = await client.expect('reset_required');
    expect(reset).toMatchObject({
      reason: 'cursor_expired',
      token: at10,
      history: { id: 'hist-7', floor: 21, head: 45 },
    });
    expect(await client.drainUntilClosed()).toEqual([]);

    const resumed = await subscribe(h, { start: { mode: 'resume', token: at20 } });
    expect(resumed.subscribed.startPosition).toBe(20);
    const fromFloor = await subscribe(h, { consumerId: 'consumer-z', start: { mode: 'from_floor' } });
    expect(fromFloor.subscribed.startPosition).toBe(20);
  });

  it('answers reset_required history_rebuilt for a token of a rebuilt history, and hello shows the new id', async () => {
    const server = await h.start();
    const { token } = await checkpointAt(10);
    server.journal.rebuildHistory();
    const client = await h.connect();
    const { hello } = await client.authenticate(API_KEY);
    expect(hello.history.id).toBe('hist-7-r1');
    client.subscribe({ consumerId: 'consumer-a', subscriptionId: 'sub-1', start: { mode: 'rebind', token } });
    expect(await client.expect('reset_required')).toMatchObject({
      reason: 'history_rebuilt',
      token,
      history: { id: 'hist-7-r1' },
    });
  });

  it('issues generation = highest issued + 1 for live_cut and from_floor, per consumer and subscription', async () => {
    const server = await h.start();
    expect((await subscribe(h, { start: { mode: 'live_cut' } })).subscribed.generation).toBe(1);
    expect((await subscribe(h, { start: { mode: 'from_floor' } })).subscribed.generation).toBe(2);
    expect((await subscribe(h, { subscriptionId: 'sub-2', start: { mode: 'from_floor' } })).subscribed.generation).toBe(
      1,
    );
    expect((await subscribe(h, { consumerId: 'consumer-b', start: { mode: 'live_cut' } })).subscribed.generation).toBe(
      1,
    );
    expect(server.issuedGeneration('consumer-a', 'sub-1')).toBe(2);
  });

  it('rebind scans from the token position with the new filter as generation + 1; an ACK naming the old generation is rejected', async () => {
    const server = await h.start();
    const { token } = await checkpointAt(20);
    const newFilter = { kinds: ['trade'] };
    const { client, hello, subscribed } = await subscribe(h, { filter: newFilter, start: { mode: 'rebind', token } });
    expect(subscribed).toMatchObject({
      generation: 2,
      startPosition: 20,
      filterHash: filterHash(newFilter),
      cut: { position: 45 },
    });
    const frames = await replayFrames(client);
    expect(deliveredEvents(frames)).toEqual(journalEvents((e) => e.kind === 'trade').filter((e) => e.position > 20));
    expect(ofType(frames, 'batch').every((b) => b.generation === 2)).toBe(true);
    const checkpoint = ofType(frames, 'checkpoint')[0]!;
    expect(checkpoint.generation).toBe(2);

    client.ack(hello.connectionId, { ...checkpoint, generation: 1 });
    expect(await client.expect('error')).toMatchObject({ code: 'stale_generation', retryable: false });
    expect(await server.waitForRejectedAck()).toMatchObject({
      reason: 'stale_generation',
      generation: 1,
      consumerId: 'consumer-a',
    });
    expect(server.acks).toEqual([]);
  });
});

describe('acknowledgements', () => {
  it('records accepted ACKs with their binding', async () => {
    const server = await h.start();
    const { client, hello } = await subscribe(h, { start: { mode: 'from_floor' } });
    const checkpoint = await client.nextOfType('checkpoint');
    client.ack(hello.connectionId, checkpoint);
    const ack = await server.waitForAck();
    expect(ack).toMatchObject({
      connectionId: hello.connectionId,
      consumerId: 'consumer-a',
      subscriptionId: 'sub-1',
      generation: 1,
      position: 10,
      token: checkpoint.token,
    });
    expect(ack.at).toBeInstanceOf(Date);
  });

  it.each([
    ['another connection id', { connectionId: 'conn-other' }, 'wrong_connection'],
    ['a position that was not checkpointed', { position: 11 }, 'unknown_checkpoint'],
    ['a token that was not sent', { token: 'made-up-token' }, 'unknown_checkpoint'],
  ] as const)('rejects an ACK with %s as a protocol violation', async (_name, change, reason) => {
    const server = await h.start();
    const { client, hello } = await subscribe(h, { start: { mode: 'from_floor' } });
    const checkpoint = await client.nextOfType('checkpoint');
    client.send({
      type: 'ack',
      connectionId: hello.connectionId,
      generation: 1,
      position: checkpoint.position,
      token: checkpoint.token,
      ...change,
    });
    expect(await client.nextOfType('error')).toMatchObject({ code: 'protocol_violation', retryable: false });
    expect(await server.waitForRejectedAck()).toMatchObject({ reason });
    await client.drainUntilClosed();
  });

  it('pauses at the window of unacknowledged checkpoints and resumes on ACKs', async () => {
    await h.start({ checkpointEvery: 1, maxUnackedCheckpoints: 2 });
    const { client, hello } = await subscribe(h, { start: { mode: 'from_floor' } });
    for (;;) {
      const frame = await client.next();
      if (frame.type === 'checkpoint') client.ack(hello.connectionId, frame);
      if (frame.type === 'caught_up') break;
    }
    expect(client.isClosed).toBe(false);
  });

  it('fails with slow_consumer (retryable) when the window stays full', async () => {
    await h.start({ checkpointEvery: 1, maxUnackedCheckpoints: 2, slowConsumerGraceMs: 0 });
    const { client } = await subscribe(h, { start: { mode: 'from_floor' } });
    const rest = await client.drainUntilClosed();
    const frames = rest.map((r) => r.frame!);
    expect(ofType(frames, 'checkpoint').map((c) => c.position)).toEqual([1, 2]);
    expect(frames.at(-1)).toMatchObject({ type: 'error', code: 'slow_consumer', retryable: true });
  });
});

describe('protocol violations', () => {
  it.each([
    ['malformed JSON', (c: ScriptClient) => c.sendRaw('{not json')],
    ['a binary frame', (c: ScriptClient) => c.sendRaw(Buffer.from('{}'), { binary: true })],
    [
      'an oversize frame',
      (c: ScriptClient) => c.sendRaw(JSON.stringify({ v: 1, type: 'authenticate', apiKey: 'k'.repeat(5000) })),
    ],
    ['an unknown frame type', (c: ScriptClient) => c.sendRaw(JSON.stringify({ v: 1, type: 'gossip' }))],
    [
      'subscribe before authenticate',
      (c: ScriptClient) => c.subscribe({ consumerId: 'a', subscriptionId: 'b', start: { mode: 'live_cut' } }),
    ],
    [
      'an ACK before subscribe',
      (c: ScriptClient) => c.send({ type: 'ack', connectionId: 'x', generation: 1, position: 1, token: 't' }),
    ],
  ])('answers %s with protocol_violation and closes', async (_name, act) => {
    await h.start({ maxFrameBytes: 4096 });
    const client = await h.connect();
    await client.expect('hello');
    act(client);
    expect(await client.expect('error')).toMatchObject({ code: 'protocol_violation', retryable: false });
    expect(await client.drainUntilClosed()).toEqual([]);
  });

  it('refuses a second subscribe on the same connection', async () => {
    await h.start();
    const { client } = await subscribe(h, { start: { mode: 'live_cut' } });
    await replayFrames(client);
    client.subscribe({ consumerId: 'consumer-a', subscriptionId: 'sub-1', start: { mode: 'live_cut' } });
    expect(await client.nextOfType('error')).toMatchObject({ code: 'protocol_violation' });
  });
});

describe('connections of one consumer', () => {
  it('closes the older connection when a newer one of the same binding subscribes', async () => {
    const server = await h.start();
    const first = await subscribe(h, { start: { mode: 'live_cut' } });
    await replayFrames(first.client);
    await subscribe(h, { start: { mode: 'live_cut' } });
    expect((await first.client.closed).code).toBe(4000);
    expect((await server.waitForDisconnect(first.hello.connectionId)).closed).toBe(true);
  });

  it('lets tests await connections and their close without sleeping', async () => {
    const server = await h.start();
    const client = await h.connect();
    const hello = await client.expect('hello');
    const record = await server.waitForConnection(1);
    expect(record).toMatchObject({ connectionId: hello.connectionId, closed: false });
    const closed = server.waitForDisconnect(hello.connectionId);
    await client.close();
    expect((await closed).closed).toBe(true);
  });

  it('terminates open sessions when the history is rebuilt', async () => {
    const server = await h.start();
    const { client } = await subscribe(h, { start: { mode: 'live_cut' } });
    await replayFrames(client);
    server.journal.rebuildHistory();
    expect((await client.closed).code).toBe(1006);
  });

  it('closes every socket on server close', async () => {
    const server = await h.start();
    const { client } = await subscribe(h, { start: { mode: 'live_cut' } });
    await server.close();
    await client.closed;
    expect(client.isClosed).toBe(true);
    expect(server.connections.every((c) => c.closed)).toBe(true);
  });
});
