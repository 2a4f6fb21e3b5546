// Each deliberate breach the reference server can commit, as a consumer would observe it on the wire.
import { describe, expect, it } from 'vitest';
import { WireError } from '../../protocol/codec.js';
import { canonicalJson, eventContentHash } from '../../protocol/canonical.js';
import { API_KEY, ofType, replayFrames, subscribe, useHarness } from './harness.js';

const h = useHarness();

describe('connection drops', () => {
  it('terminates the connection after N frames, once', async () => {
    const server = await h.start({ faults: { dropAfterFrames: 4 } });
    const { client } = await subscribe(h, { start: { mode: 'from_floor' } });
    // hello, authenticated, subscribed, then one more frame
    const rest = await client.drainUntilClosed();
    expect(rest).toHaveLength(1);
    expect((await client.closed).code).toBe(1006);
    expect(server.faults.dropAfterFrames).toBeUndefined();
    const again = await subscribe(h, { consumerId: 'consumer-b', start: { mode: 'from_floor' } });
    expect((await replayFrames(again.client)).at(-1)?.type).toBe('caught_up');
  });

  it('terminates the connection right after the frames of a position', async () => {
    await h.start({ checkpointEvery: 5, faults: { dropAtPosition: 10 } });
    const { client } = await subscribe(h, { start: { mode: 'from_floor' } });
    const frames = (await client.drainUntilClosed()).map((r) => r.frame!);
    const positions = frames.map((f) => ('position' in f ? f.position : 0));
    expect(Math.max(...positions)).toBe(10);
    expect(frames.at(-1)).toMatchObject({ type: 'checkpoint', position: 10 });
  });
});

describe('frame sequence faults', () => {
  it.each([
    ['duplicate', [1, 2, 3, 3, 4]],
    ['skip', [1, 2, 3, 5, 6]],
    ['reorder', [1, 2, 3, 5, 4]],
  ] as const)('%s: the 4th frame breaks the +1 sequence', async (mode, expected) => {
    await h.start({ faults: { frameSequence: { mode, atFrame: 4 } } });
    const { client, hello, subscribed } = await subscribe(h, { start: { mode: 'from_floor' } });
    const next = [await client.next(), await client.next()];
    expect([hello, { frameSequence: 2 }, subscribed, ...next].map((f) => f.frameSequence)).toEqual(expected);
  });
});

describe('ACK faults', () => {
  it('refuses an ACK: error, connection closed, rejection recorded, nothing accepted', async () => {
    const server = await h.start({ faults: { ack: { mode: 'refuse', count: 1 } } });
    const { client, hello } = await subscribe(h, { start: { mode: 'from_floor' } });
    const checkpoint = await client.nextOfType('checkpoint');
    client.ack(hello.connectionId, checkpoint);
    expect(await client.nextOfType('error')).toMatchObject({ code: 'overloaded', retryable: true });
    await client.drainUntilClosed();
    expect(await server.waitForRejectedAck()).toMatchObject({ reason: 'fault_refused', position: checkpoint.position });
    expect(server.acks).toEqual([]);
  });

  it('loses an ACK silently: the connection goes on and the next ACK is accepted', async () => {
    const server = await h.start({ faults: { ack: { mode: 'lose', count: 1 } } });
    const { client, hello } = await subscribe(h, { start: { mode: 'from_floor' } });
    const first = await client.nextOfType('checkpoint');
    client.ack(hello.connectionId, first);
    const second = await client.nextOfType('checkpoint');
    client.ack(hello.connectionId, second);
    expect(await server.waitForAck()).toMatchObject({ position: second.position });
    expect(server.rejectedAcks).toEqual([expect.objectContaining({ reason: 'fault_lost', position: first.position })]);
    expect(server.acks).toHaveLength(1);
  });
});

describe('subscribe faults', () => {
  it('answers overloaded with retryAfterMs for the next N subscribes, then serves', async () => {
    const server = await h.start({ faults: { overloadSubscribes: { count: 2, retryAfterMs: 250 } } });
    for (let i = 0; i < 2; i++) {
      const client = await h.connect();
      await client.authenticate('test-key-3f9a');
      client.subscribe({ consumerId: 'consumer-a', subscriptionId: 'sub-1', start: { mode: 'live_cut' } });
      expect(await client.expect('error')).toMatchObject({ code: 'overloaded', retryable: true, retryAfterMs: 250 });
      expect(await client.drainUntilClosed()).toEqual([]);
    }
    const { subscribed } = await subscribe(h, { start: { mode: 'live_cut' } });
    expect(subscribed.generation).toBe(1);
    expect(server.faults.overloadSubscribes).toBeUndefined();
  });

  it('keeps an old connection draining its frames after a newer one of the same consumer is active', async () => {
    const server = await h.start({ faults: { drainOldConnections: true } });
    const old = await subscribe(h, { start: { mode: 'from_floor' } });
    const newer = await subscribe(h, { start: { mode: 'from_floor' } });
    expect(newer.subscribed.generation).toBe(2);
    const oldFrames = await replayFrames(old.client);
    expect(oldFrames.at(-1)).toMatchObject({ type: 'caught_up', generation: 1 });
    expect(old.client.isClosed).toBe(false);
    server.journal.appendGenerated();
    // both connections deliver the live transition
    expect((await old.client.nextOfType('batch')).position).toBe(46);
    await replayFrames(newer.client);
    expect((await newer.client.nextOfType('batch')).position).toBe(46);
  });
});

describe('event faults', () => {
  it('injects a conflicting eventId: an earlier delivered eventId with different content', async () => {
    await h.start({ faults: { conflictingEventAt: 12 } });
    const { client } = await subscribe(h, { start: { mode: 'from_floor' } });
    const batches = ofType(await replayFrames(client), 'batch');
    const seen = new Map<string, string>();
    const conflicts: string[] = [];
    for (const b of batches) {
      for (const e of b.events) {
        const hash = eventContentHash(e);
        const earlier = seen.get(e.eventId);
        if (earlier !== undefined && earlier !== hash) conflicts.push(e.eventId);
        seen.set(e.eventId, hash);
      }
    }
    expect(conflicts).toHaveLength(1);
    const conflicted = batches.find((b) => b.events.some((e) => e.eventId === conflicts[0] && b.position >= 12))!;
    expect(conflicted.position).toBeGreaterThanOrEqual(12);
  });

  it('injects an event of an unknown kind', async () => {
    await h.start({ faults: { unknownKindAt: 3 } });
    const { client } = await subscribe(h, { start: { mode: 'from_floor' } });
    const batches = ofType(await replayFrames(client), 'batch');
    const unknown = batches.flatMap((b) =>
      b.events.filter((e) => e.kind !== 'trade' && e.kind !== 'correction').map(() => b.position),
    );
    expect(unknown).toEqual([3]);
  });

  it('keeps that event unknown on every later delivery, as if the journal held it so', async () => {
    // The first connection ends before its client committed anything past position 3 (an explicit start ends at
    // its first commit): the next one must deliver the same content, or no quarantine would ever show.
    await h.start({ faults: { unknownKindAt: 3 } });
    const unknownOf = async (consumerId: string) => {
      const { client } = await subscribe(h, { consumerId, start: { mode: 'from_floor' } });
      const batches = ofType(await replayFrames(client), 'batch');
      return batches.flatMap((b) =>
        b.events.filter((e) => e.kind === 'market_resolution').map((e) => ({ position: b.position, id: e.eventId })),
      );
    };
    const first = await unknownOf('consumer-a');
    expect(first).toHaveLength(1);
    expect(await unknownOf('consumer-a')).toEqual(first);
    expect(await unknownOf('consumer-b')).toEqual(first);
  });

  it('injects a frame over maxFrameBytes', async () => {
    await h.start({ maxFrameBytes: 8192, faults: { oversizeFrameAt: 2 } });
    const client = await h.connect({ maxFrameBytes: 8192 });
    await client.handshake('test-key-3f9a', { consumerId: 'c', subscriptionId: 's', start: { mode: 'from_floor' } });
    expect((await client.next()).type).toBe('batch');
    const oversize = await client.nextReceived();
    expect(oversize.error).toBeInstanceOf(WireError);
    expect(oversize.error?.code).toBe('frame_too_large');
    expect(Buffer.byteLength(oversize.raw)).toBeGreaterThan(8192);
  });
});

/** A fault that recurs on every session must look the same each time, and stop once it is removed. */
describe('recurring faults (every session until removed)', () => {
  it('malformed caught_up: every session gets its checkpoint at the cut, then a caught_up whose cut is a number', async () => {
    const server = await h.start({ faults: { malformedCaughtUp: true } });
    const head = server.journal.head;
    let token: string | undefined;
    for (let session = 0; session < 2; session++) {
      const start = token ? { mode: 'resume' as const, token } : { mode: 'from_floor' as const };
      const { client } = await subscribe(h, { start });
      const checkpoint = await client.collectUntil((f) => f.type === 'checkpoint' && f.position === head);
      token = ofType(checkpoint, 'checkpoint').at(-1)!.token;
      const caughtUp = await client.nextReceived();
      expect(caughtUp.error).toBeInstanceOf(WireError);
      expect(JSON.parse(caughtUp.raw)).toMatchObject({ type: 'caught_up', cut: head });
      await client.close();
    }
    expect(server.faults.malformedCaughtUp).toBe(true);

    server.faults.malformedCaughtUp = undefined;
    const { client } = await subscribe(h, { start: { mode: 'resume', token: token! } });
    expect((await replayFrames(client)).at(-1)).toMatchObject({ type: 'caught_up', cut: { position: head } });
  });

  it('frameSequence gap at the same frame of every session, until the fault is removed', async () => {
    const server = await h.start({ faults: { frameSequence: { mode: 'skip', atFrame: 4, everySession: true } } });
    const sequences = async (): Promise<number[]> => {
      const { client, hello, subscribed } = await subscribe(h, { start: { mode: 'from_floor' } });
      const next = [await client.next(), await client.next(), await client.next()];
      await client.close();
      return [hello.frameSequence, 2, subscribed.frameSequence, ...next.map((f) => f.frameSequence)];
    };
    expect(await sequences()).toEqual([1, 2, 3, 5, 6, 7]);
    expect(await sequences()).toEqual([1, 2, 3, 5, 6, 7]);
    server.faults.frameSequence = undefined;
    expect(await sequences()).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('a duplicated frameSequence recurring on every session breaks each session once, not every later frame', async () => {
    await h.start({ faults: { frameSequence: { mode: 'duplicate', atFrame: 4, everySession: true } } });
    for (let session = 0; session < 2; session++) {
      const { client } = await subscribe(h, { start: { mode: 'from_floor' } });
      const next = [await client.next(), await client.next(), await client.next()];
      expect(next.map((f) => f.frameSequence)).toEqual([3, 4, 5]);
      await client.close();
    }
  });

  it('overloaded that never clears: every subscribe is refused (retryable, retryAfterMs) until removed', async () => {
    const server = await h.start({ faults: { overloadEverySubscribe: { retryAfterMs: 40 } } });
    for (let i = 0; i < 3; i++) {
      const client = await h.connect();
      await client.authenticate(API_KEY);
      client.subscribe({ consumerId: 'consumer-a', subscriptionId: 'sub-1', start: { mode: 'from_floor' } });
      expect(await client.expect('error')).toMatchObject({ code: 'overloaded', retryable: true, retryAfterMs: 40 });
      expect(await client.drainUntilClosed()).toEqual([]);
    }
    expect(server.subscriptions).toEqual([]);

    delete server.faults.overloadEverySubscribe;
    const { client } = await subscribe(h, { start: { mode: 'from_floor' } });
    expect((await replayFrames(client)).at(-1)).toMatchObject({
      type: 'caught_up',
      cut: { position: server.journal.head },
    });
  });
});

/** Content identity: what an event says (kind, entityId, revision, data), not where it was delivered. */
function content(e: { kind: string; entityId: string; revision: number; data: Record<string, unknown> }): string {
  return canonicalJson({ kind: e.kind, entityId: e.entityId, revision: e.revision, data: e.data });
}

describe('the same event at another position', () => {
  it('overlapping redelivery: a later transition repeats earlier events verbatim on the wire', async () => {
    const server = await h.start();
    const earlier = server.journal.transitionAt(5)!.events;
    const repeat = server.journal.redeliver(earlier.map((e) => e.eventId));
    expect(repeat.position).toBe(46);
    const { client } = await subscribe(h, { start: { mode: 'from_floor' } });
    const batches = ofType(await replayFrames(client), 'batch');
    const at5 = batches.find((b) => b.position === 5)!;
    const at46 = batches.find((b) => b.position === 46)!;
    expect(at46.events.map((e) => e.eventId)).toEqual(at5.events.map((e) => e.eventId));
    expect(at46.events.map(content)).toEqual(at5.events.map(content));
    expect(at46.events.map((e) => e.ordinal)).toEqual(at5.events.map((_, i) => i + 1));
  });

  it('a rebuilt history reuses the old eventIds at shifted positions: from_floor redelivers them as duplicates', async () => {
    const server = await h.start();
    const old = await subscribe(h, { start: { mode: 'from_floor' } });
    const oldFrames = await replayFrames(old.client);
    const checkpoint = ofType(oldFrames, 'checkpoint').at(-1)!;
    const oldBatches = ofType(oldFrames, 'batch');

    server.journal.rebuildHistory({ shift: 100 });
    expect(server.journal.history).toEqual({ id: 'hist-7-r1', floor: 1, head: 145 });
    await old.client.closed;
    const client = await h.connect();
    await client.authenticate(API_KEY);
    client.subscribe({
      consumerId: 'consumer-a',
      subscriptionId: 'sub-1',
      start: { mode: 'resume', token: checkpoint.token },
    });
    expect(await client.expect('reset_required')).toMatchObject({ reason: 'history_rebuilt' });

    // The operator decides from_floor: the same events come again, 100 positions further on.
    const decided = await subscribe(h, { start: { mode: 'from_floor' } });
    const newBatches = ofType(await replayFrames(decided.client), 'batch');
    expect(newBatches.map((b) => b.position)).toEqual(oldBatches.map((b) => b.position + 100));
    const byId = (batches: typeof oldBatches): Array<[string, string]> =>
      batches.flatMap((b) => b.events.map((e): [string, string] => [e.eventId, content(e)]));
    expect(byId(newBatches)).toEqual(byId(oldBatches));
  });
});
