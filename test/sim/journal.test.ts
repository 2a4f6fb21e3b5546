// The journal generator and its file format: deterministic from a seed, realistic shapes, JSONL round trip.
import { appendFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { tradeDataSchema } from '../../protocol/codec.js';
import { isoTimestamp } from '../../simulator/iso-timestamp.js';
import { Journal } from '../../simulator/journal.js';
import { JournalError, type Transition } from '../../simulator/journal-types.js';

function all(journal: Journal): Transition[] {
  return [...journal.range(0, journal.head)];
}

let dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
  dirs = [];
});

describe('Journal.generate', () => {
  it('is deterministic from its seed', () => {
    const a = Journal.generate({ seed: 42, transitions: 300 });
    const b = Journal.generate({ seed: 42, transitions: 300 });
    const c = Journal.generate({ seed: 43, transitions: 300 });
    expect(all(a)).toEqual(all(b));
    expect(a.mappings).toEqual(b.mappings);
    expect(all(a)).not.toEqual(all(c));
  });

  it('produces realistic Polymarket shapes with strictly increasing positions and unique eventIds', () => {
    const journal = Journal.generate({ seed: 42, transitions: 500, correctionRate: 0.1 });
    const transitions = all(journal);
    expect(transitions.map((t) => t.position)).toEqual(transitions.map((_, i) => i + 1));
    const events = transitions.flatMap((t) => t.events);
    expect(new Set(events.map((e) => e.eventId)).size).toBe(events.length);
    for (const t of transitions) expect(t.events.map((e) => e.ordinal)).toEqual(t.events.map((_, i) => i + 1));
    for (const e of events) {
      const data = tradeDataSchema.parse(e.data);
      expect(journal.mappings[data.asset]?.market).toBe(data.market);
      expect(data.price).toMatch(/^0\.\d{3}$/);
      expect(data.txHash).toMatch(/^0x[0-9a-f]{64}$/);
    }
    const outcomes = new Set(Object.values(journal.mappings).map((m) => m.outcome));
    expect(outcomes).toEqual(new Set(['Yes', 'No']));
    // observedAt jitters: journal order is not observedAt order
    const times = events.map((e) => Date.parse(e.observedAt));
    expect(times.some((t, i) => i > 0 && t < times[i - 1]!)).toBe(true);
  });

  it('corrects earlier trades with the same entityId and increasing revisions', () => {
    const events = all(Journal.generate({ seed: 5, transitions: 400, correctionRate: 0.15 })).flatMap((t) => t.events);
    const corrections = events.filter((e) => e.kind === 'correction');
    expect(corrections.length).toBeGreaterThan(10);
    const revisions = new Map<string, number>();
    for (const e of events) {
      if (e.kind === 'trade') {
        expect(e.revision).toBe(1);
        revisions.set(e.entityId, 1);
      } else {
        expect(e.revision).toBe((revisions.get(e.entityId) ?? Number.NaN) + 1);
        revisions.set(e.entityId, e.revision);
      }
    }
  });
});

describe('Journal', () => {
  it('round-trips through JSON lines and keeps appending with fresh eventIds', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'journal-'));
    dirs.push(dir);
    const journal = Journal.generate({ seed: 9, transitions: 120, qualityRate: 0.2 });
    journal.setRetentionFloor(11);
    const file = join(dir, 'journal.jsonl');
    await journal.save(file);
    const loaded = await Journal.load(file);
    expect(all(loaded)).toEqual(all(journal));
    expect(loaded.history).toEqual(journal.history);
    expect(loaded.mappings).toEqual(journal.mappings);
    expect(loaded.qualityAt(120)).toEqual(journal.qualityAt(120));
    const appended = loaded.appendGenerated();
    expect(appended.position).toBe(121);
    const ids = new Set(all(journal).flatMap((t) => t.events.map((e) => e.eventId)));
    for (const e of appended.events) expect(ids.has(e.eventId)).toBe(false);
  });

  it('rejects a corrupt file naming the line', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'journal-'));
    dirs.push(dir);
    const file = join(dir, 'bad.jsonl');
    await Journal.generate({ seed: 1, transitions: 2 }).save(file);
    await appendFile(file, '{"record":"transition","position":1,"events":[]}\n');
    await expect(Journal.load(file)).rejects.toThrow(/bad\.jsonl:4/);
  });

  it('appends at head + 1 with ordinals 1..n, notifies listeners, and refuses duplicate eventIds', () => {
    const journal = Journal.generate({ seed: 3, transitions: 2 });
    const seen: number[] = [];
    const stop = journal.onAppend((t) => seen.push(t.position));
    const base = { kind: 'trade', entityId: 'trade-x', revision: 1, observedAt: '2026-01-01T00:00:00.000Z', data: {} };
    const t = journal.append({
      events: [{ ...base, eventId: 'ev-custom-1' }, base],
      quality: [{ scope: 'polymarket:clob', state: 'degraded' }],
    });
    expect(t.position).toBe(3);
    expect(t.events.map((e) => e.ordinal)).toEqual([1, 2]);
    expect(seen).toEqual([3]);
    stop();
    expect(journal.qualityAt(3)).toContainEqual({ scope: 'polymarket:clob', state: 'degraded', lastPosition: 3 });
    expect(() => journal.append({ events: [{ ...base, eventId: 'ev-custom-1' }] })).toThrow(JournalError);
    expect(() => journal.append({ events: [] })).toThrow(/at least one source event/);
  });

  it('moves the retention floor within bounds and rebuilds history with a new id and positions from 1', () => {
    const journal = Journal.generate({ seed: 3, transitions: 20 });
    expect(() => journal.setRetentionFloor(25)).toThrow(JournalError);
    journal.setRetentionFloor(6);
    expect(journal.history).toEqual({ id: 'hist-3', floor: 6, head: 20 });
    expect(journal.transitionAt(5)).toBeUndefined();
    const firstKept = journal.transitionAt(6)!.events;
    journal.rebuildHistory();
    expect(journal.history).toEqual({ id: 'hist-3-r1', floor: 1, head: 15 });
    expect(journal.transitionAt(1)!.events).toEqual(firstKept);
  });

  it('redelivers earlier events verbatim at a new position, and keeps them through a save and load', async () => {
    const journal = Journal.generate({ seed: 3, transitions: 10, maxEventsPerTransition: 3 });
    const [a, b] = [journal.transitionAt(2)!.events[0]!, journal.transitionAt(7)!.events[0]!];
    const seen: number[] = [];
    journal.onAppend((t) => seen.push(t.position));
    const repeat = journal.redeliver([b.eventId, a.eventId]);
    expect(repeat).toEqual({
      position: 11,
      events: [
        { ...b, ordinal: 1 },
        { ...a, ordinal: 2 },
      ],
      quality: [],
    });
    expect(seen).toEqual([11]);
    expect(() => journal.redeliver(['ev-nope'])).toThrow(expect.objectContaining({ code: 'unknown_event_id' }));
    expect(() => journal.redeliver([a.eventId, a.eventId])).toThrow(
      expect.objectContaining({ code: 'duplicate_event_id' }),
    );
    expect(() => journal.append({ events: [{ ...a }] })).toThrow(
      expect.objectContaining({ code: 'duplicate_event_id' }),
    );

    const dir = await mkdtemp(join(tmpdir(), 'journal-'));
    dirs.push(dir);
    const file = join(dir, 'redelivered.jsonl');
    await journal.save(file);
    expect(all(await Journal.load(file))).toEqual(all(journal));
  });

  it('rebuilds history with the same events at positions shifted by `shift`', () => {
    const journal = Journal.generate({ seed: 3, transitions: 20, qualityRate: 0.5 });
    journal.setRetentionFloor(6);
    const kept = all(journal);
    const qualityAt20 = journal.qualityAt(20).map((q) => ({ ...q, lastPosition: q.lastPosition + 95 }));
    expect(() => journal.rebuildHistory({ shift: -1 })).toThrow(expect.objectContaining({ code: 'invalid_shift' }));
    journal.rebuildHistory({ shift: 100 });
    expect(journal.history).toEqual({ id: 'hist-3-r1', floor: 1, head: 115 });
    expect(all(journal)).toEqual(kept.map((t) => ({ ...t, position: t.position + 95 })));
    expect(journal.qualityAt(115)).toEqual(qualityAt20);
    expect(journal.appendGenerated().position).toBe(116);
  });

  it('appends live transitions observed now, as a live source does, the generated ones staying on their clock', () => {
    const journal = Journal.generate({ seed: 5, transitions: 3 });
    const now = Date.parse('2026-12-01T12:00:00.000Z');
    const live = journal.appendLive(now);
    expect(live.position).toBe(4);
    for (const event of live.events) {
      const age = now - Date.parse(event.observedAt);
      expect(age).toBeGreaterThanOrEqual(0);
      expect(age).toBeLessThan(1_000);
    }
    expect(journal.transitionAt(4)).toEqual(live);
    // The next generated transition continues the journal's synthetic clock, months earlier.
    expect(Date.parse(journal.appendGenerated().events[0]!.observedAt)).toBeLessThan(now - 86_400_000);
  });

  it('keeps no generated transition in memory: it serves what it published, regenerated, within a few runs', () => {
    // Short runs and a small cache, so that a few thousand transitions go through regeneration and eviction.
    const [RUN_LENGTH, CACHED_RUNS] = [64, 2];
    const journal = Journal.generate({ seed: 11, transitions: 0, runLength: RUN_LENGTH, cachedRuns: CACHED_RUNS });
    const published: Transition[] = [];
    journal.onAppend((t) => published.push(structuredClone(t)));
    const runs = 40;
    for (let i = 0; i < runs * RUN_LENGTH; i++) {
      journal.appendGenerated();
      // An explicit append and a redelivery in between: stored, and the generated runs around them unchanged.
      if (i === 2 * RUN_LENGTH + 5) {
        const earlier = journal.transitionAt(3)!.events[0]!;
        journal.redeliver([earlier.eventId]);
        journal.append({ events: [{ ...earlier, eventId: 'ev-explicit', entityId: 'explicit-1' }] });
      }
    }
    const resident = () => journal.residentTransitions;
    // At most the cached runs plus the two stored transitions, however long the journal grows.
    expect(resident()).toBeLessThanOrEqual(CACHED_RUNS * RUN_LENGTH + 2);
    expect(all(journal)).toEqual(published);
    expect(resident()).toBeLessThanOrEqual(CACHED_RUNS * RUN_LENGTH + 2);
    // Backward reads (a page source's `before`) and lookups by eventId regenerate as needed.
    expect(journal.at(5)).toEqual(published[5]);
    const late = published.at(-1)!.events[0]!;
    expect(journal.redeliver([late.eventId]).events[0]).toEqual({ ...late, ordinal: 1 });
    journal.setRetentionFloor(RUN_LENGTH + 7);
    expect(all(journal)).toEqual(published.slice(RUN_LENGTH + 6));
  });
});

describe('isoTimestamp', () => {
  it('writes what Date#toISOString writes, across days and years', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 8_640_000_000_000_000 - 5_000 }),
        fc.integer({ min: -5_000, max: 5_000 }),
        (ms, step) => {
          // two calls in a row: the second may reuse the first one's day
          for (const at of [ms, Math.max(0, ms + step)]) expect(isoTimestamp(at)).toBe(new Date(at).toISOString());
        },
      ),
      { numRuns: 2_000 },
    );
  });
});
