// The pure page logic (protocol/pages.ts): what a page is, the split at the applied position, chunks that
// never split a position, and the bounded backoff.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { eventContentHash } from '../../protocol/canonical.js';
import { WireError, type PageEvent } from '../../protocol/codec.js';
import { backoffDelay } from '../../protocol/backoff.js';
import {
  chunkByPosition,
  classifyPage,
  journalOrderProblem,
  splitAtApplied,
  stagePageEvents,
} from '../../protocol/pages.js';
import type { StagedEvent } from '../../protocol/types.js';
import { trade } from '../../bench/fixtures.js';

const at = (position: number, ordinal = 1): StagedEvent => trade(position, `x-${position}-${ordinal}`, {}, { ordinal });

/** Journal-ordered events: strictly increasing positions, 1..4 ordinals each. */
const journalEvents = fc
  .array(fc.tuple(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 1, max: 4 })), { maxLength: 30 })
  .map((steps) => {
    let position = 0;
    return steps.flatMap(([gap, count]) => {
      position += gap;
      return Array.from({ length: count }, (_, i) => at(position, i + 1));
    });
  });

describe('classifyPage', () => {
  const event = (position: number) => ({ position }) as PageEvent;

  it('a page whose next equals the request cursor is non-advancing; nothing new when no event is above the applied position', () => {
    expect(classifyPage('C7', { next: 'C7', events: [] }, 105)).toEqual({ kind: 'non_advancing', nothingNew: true });
    expect(classifyPage('C7', { next: 'C7', events: [event(104), event(105)] }, 105)).toEqual({
      kind: 'non_advancing',
      nothingNew: true,
    });
    expect(classifyPage('C7', { next: 'C7', events: [event(104), event(106)] }, 105)).toEqual({
      kind: 'non_advancing',
      nothingNew: false,
    });
  });

  it('an empty page with a new token is a zero-item page; the first page (no cursor) always advances', () => {
    expect(classifyPage('C7', { next: 'C8', events: [] }, 105)).toEqual({ kind: 'advancing', zeroItem: true });
    expect(classifyPage('C7', { next: 'C8', events: [event(106)] }, 105)).toEqual({
      kind: 'advancing',
      zeroItem: false,
    });
    expect(classifyPage(null, { next: 'C1', events: [] }, 0)).toEqual({ kind: 'advancing', zeroItem: true });
  });
});

describe('stagePageEvents', () => {
  it('hashes each event with its position, as the stream does', () => {
    const event: PageEvent = {
      position: 9,
      ordinal: 2,
      eventId: 'e9',
      kind: 'trade',
      entityId: 'x9',
      revision: 1,
      observedAt: '2026-11-29T12:00:00.000Z',
      data: { market: 'm', asset: 'a', side: 'BUY', price: '0.5', size: '2', wallet: 'w', txHash: 't' },
    };
    const [staged] = stagePageEvents([event], 0);
    const { position: _position, ...wire } = event;
    // The trade is parsed once here and carried to the commit.
    expect(staged).toEqual({
      ...wire,
      position: 9,
      trade: wire.data,
      contentHash: eventContentHash(wire),
      delivery: 'backfill',
      receivedAt: 0,
    });
    // Identity is what the event says: the same event staged at another position and ordinal hashes the same.
    expect(stagePageEvents([{ ...event, position: 10, ordinal: 1 }], 0)[0]!.contentHash).toBe(staged!.contentHash);
  });

  it('refuses a supported kind with malformed data, naming the field; stages an unsupported kind as is', () => {
    const base = { ordinal: 1, entityId: 'x', revision: 1, observedAt: '2026-11-29T12:00:00.000Z' };
    const malformed: PageEvent = { ...base, position: 3, eventId: 'e3', kind: 'trade', data: { market: 'm' } };
    expect(() => stagePageEvents([malformed], 0)).toThrow(WireError);
    expect(() => stagePageEvents([malformed], 0)).toThrow(/events\.data\.asset/);
    const odd: PageEvent = { ...base, position: 4, eventId: 'e4', kind: 'split', data: { any: 'thing' } };
    expect(stagePageEvents([odd], 0)[0]).toMatchObject({ kind: 'split', trade: null });
  });
});

describe('journalOrderProblem', () => {
  it('accepts journal order and names the first event out of it', () => {
    expect(journalOrderProblem([at(1), at(1, 2), at(3)])).toBeNull();
    expect(journalOrderProblem([at(1, 2), at(1, 2)])).toMatch(/at 1\/2 follows .* at 1\/2/);
    expect(journalOrderProblem([at(5), at(4)])).toMatch(/at 4\/1 follows .* at 5\/1/);
  });
});

describe('splitAtApplied', () => {
  it('the oracle page: 104 is recognised, 106 and 107 are fresh', () => {
    const { recognised, fresh } = splitAtApplied([at(104), at(106), at(107)], 105);
    expect(recognised.map((e) => e.position)).toEqual([104]);
    expect(fresh.map((e) => e.position)).toEqual([106, 107]);
  });

  it('partitions in order at the applied position', () => {
    fc.assert(
      fc.property(journalEvents, fc.integer({ min: 0, max: 100 }), (events, applied) => {
        const { recognised, fresh } = splitAtApplied(events, applied);
        expect([...recognised, ...fresh]).toEqual(events);
        expect(recognised.every((e) => e.position <= applied)).toBe(true);
        expect(fresh.every((e) => e.position > applied)).toBe(true);
      }),
    );
  });
});

describe('chunkByPosition', () => {
  it('cuts after whole positions once a chunk holds chunkSize events', () => {
    const events = [at(1), at(2), at(2, 2), at(2, 3), at(3), at(4)];
    expect(chunkByPosition(events, 2).map((c) => c.map((e) => `${e.position}/${e.ordinal}`))).toEqual([
      ['1/1', '2/1', '2/2', '2/3'],
      ['3/1', '4/1'],
    ]);
    expect(chunkByPosition(events, 1).map((c) => c.length)).toEqual([1, 3, 1, 1]);
    expect(chunkByPosition([], 3)).toEqual([]);
    expect(() => chunkByPosition(events, 0)).toThrow(RangeError);
  });

  it('keeps every event in order, never splits a position, and only the last chunk is below chunkSize', () => {
    fc.assert(
      fc.property(journalEvents, fc.integer({ min: 1, max: 8 }), (events, chunkSize) => {
        const chunks = chunkByPosition(events, chunkSize);
        expect(chunks.flat()).toEqual(events);
        for (const [i, chunk] of chunks.entries()) {
          expect(chunk.length).toBeGreaterThan(0);
          if (i < chunks.length - 1) {
            expect(chunk.length).toBeGreaterThanOrEqual(chunkSize);
            expect(chunks[i + 1]![0]!.position).toBeGreaterThan(chunk.at(-1)!.position);
          }
        }
      }),
    );
  });
});

describe('backoffDelay', () => {
  const backoff = { maxAttempts: 5, initialMs: 100, maxMs: 1000 };

  it('doubles from initialMs, is capped at maxMs, and honours a longer server hint', () => {
    expect([1, 2, 3, 4, 5, 6].map((attempt) => backoffDelay(backoff, attempt))).toEqual([
      100, 200, 400, 800, 1000, 1000,
    ]);
    expect(backoffDelay(backoff, 1, 5000)).toBe(5000);
    expect(backoffDelay(backoff, 4, 50)).toBe(800);
  });
});
