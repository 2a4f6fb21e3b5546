// Content identity (docs/protocol.md §4): what the event says (kind, entityId, revision, data), not where it
// was delivered; and the exact comparison with receipts saved under the legacy hash that included the position
// and ordinal.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  canonicalJson,
  contentIdentityJson,
  CONTENT_IDENTITY_PREFIX,
  eventContentHash,
  legacyEventContentHash,
  sameContent,
  sha256Hex,
} from '../../protocol/canonical.js';
import { decideCommit, noAlerts, type ExistingRows } from '../../domain/decide.js';
import { correction, makePlan, trade } from '../../bench/fixtures.js';
import { decodeServerFrame, encodeServerFrame, type WireEvent } from '../../protocol/codec.js';
import { toStagedEvent } from '../../protocol/staging.js';
import type { StagedEvent } from '../../protocol/types.js';

const FENCE = { leaseEpoch: 1, version: 1 };
const content = { kind: 'trade', entityId: 'x1', revision: 1, data: { size: '2', price: '0.5', market: 'm' } };

const rows = (saved: Partial<ExistingRows> = {}): ExistingRows => ({
  receipts: new Map(),
  quarantine: new Map(),
  executions: new Map(),
  ...saved,
});

/** The event moved to another position and ordinal, content unchanged (a redelivery, a rebuilt history). */
const movedTo = (event: StagedEvent, position: number, ordinal: number): StagedEvent => ({
  ...event,
  position,
  ordinal,
  observedAt: '2027-01-01T00:00:00.000Z',
});

/** A receipt as the release before this identity wrote it: the legacy hash at the position it was applied at. */
const legacyReceipt = (event: StagedEvent) => ({
  contentHash: legacyEventContentHash(event, event.position, event.ordinal),
  position: event.position,
  ordinal: event.ordinal,
});

describe('eventContentHash', () => {
  it('is the prefixed SHA-256 of the canonical JSON of kind, entityId, revision and data', () => {
    expect(eventContentHash(content)).toBe(`${CONTENT_IDENTITY_PREFIX}${sha256Hex(canonicalJson(content))}`);
  });

  it('ignores delivery: position, ordinal and observedAt do not change it; any content field does', () => {
    const a = trade(4, 'e-1');
    const b = trade(90, 'e-1', {}, { ordinal: 3 });
    expect(b.contentHash).toBe(a.contentHash);
    expect(trade(4, 'e-2').contentHash).not.toBe(a.contentHash);
    expect(trade(4, 'e-1', { price: '0.51' }).contentHash).not.toBe(a.contentHash);
    expect(correction(4, 'e-1', 2).contentHash).not.toBe(correction(4, 'e-1', 3).contentHash);
    expect(eventContentHash({ ...content, kind: 'correction' })).not.toBe(eventContentHash(content));
  });
});

/** Trade-shaped data (the specialised path) and its near misses: a key missing, added, or not a string. */
const anyText = fc.oneof(
  fc.string(),
  fc.string({ unit: 'binary' }),
  // what JSON escapes or the byte writer leaves to the string path, the edges of what it writes, and a value longer
  // than the writer's first buffer
  fc.constantFrom('', '"', '\\', '\u2028', '\ud800', '\u0000', '\u001f', ' ', '\u007f', 'é', 'x'.repeat(3_000)),
);
const tradeShaped = fc.record({
  market: anyText,
  asset: anyText,
  side: anyText,
  price: anyText,
  size: anyText,
  wallet: anyText,
  txHash: anyText,
});
const eventData = fc.oneof(
  tradeShaped,
  tradeShaped.chain((data) =>
    fc
      .tuple(
        fc.constantFrom(...Object.keys(data)),
        fc.constantFrom('delete', 'replace', 'add', 'proto'),
        fc.jsonValue(),
      )
      .map(([key, how, value]) => {
        const copy: Record<string, unknown> = { ...data };
        if (how === 'delete') delete copy[key];
        if (how === 'replace') copy[key] = value;
        if (how === 'add') copy[`${key}2`] = value;
        // JSON.parse makes "__proto__" an own key, as a wire message can.
        return how === 'proto' ? (JSON.parse(JSON.stringify(copy).replace('{', '{"__proto__":1,')) as object) : copy;
      }),
  ),
  fc.dictionary(fc.string(), fc.jsonValue()),
);

describe('contentIdentityJson', () => {
  it('is byte for byte the generic canonical JSON of kind, entityId, revision and data, for any data', () => {
    fc.assert(
      fc.property(anyText, anyText, fc.integer({ min: 1 }), eventData, (kind, entityId, revision, data) => {
        const event = { kind, entityId, revision, data: data as Record<string, unknown> };
        expect(contentIdentityJson(event)).toBe(canonicalJson(event));
        expect(eventContentHash(event)).toBe(`${CONTENT_IDENTITY_PREFIX}${sha256Hex(canonicalJson(event))}`);
      }),
      { numRuns: 2_000 },
    );
  });
});

describe('eventContentHash of trade-shaped data', () => {
  // Mostly characters the byte writer copies as is, now and then one it must leave to the string path.
  const streamText = fc.string({
    unit: fc.oneof(
      { weight: 30, arbitrary: fc.constantFrom(...'09azAZ.-_:x '.split('')) },
      { weight: 1, arbitrary: fc.constantFrom('"', '\\', '\u0000', '\u001f', '\u007f', 'é', '\u2028', '\ud800', '😀') },
    ),
    maxLength: 80,
  });
  const trade = fc.record({
    market: streamText,
    asset: streamText,
    side: streamText,
    price: streamText,
    size: streamText,
    wallet: streamText,
    txHash: streamText,
  });

  it('is the prefixed SHA-256 of the generic canonical JSON, whichever path wrote it', () => {
    fc.assert(
      fc.property(streamText, streamText, fc.integer({ min: 1 }), trade, (kind, entityId, revision, data) => {
        const event = { kind, entityId, revision, data };
        expect(eventContentHash(event)).toBe(`${CONTENT_IDENTITY_PREFIX}${sha256Hex(canonicalJson(event))}`);
      }),
      { numRuns: 5_000 },
    );
  });
});

describe('the content hash of a trade received in a plain frame', () => {
  // Free text as a stream could send it: mostly plain ASCII, now and then a character JSON escapes or one outside
  // ASCII, and sometimes written with an escape JSON did not need (\u0041 for A), as another encoder might.
  const wireText = fc.string({
    unit: fc.oneof(
      { weight: 30, arbitrary: fc.constantFrom(...'09azAZ.-_:x~ '.split('')) },
      {
        weight: 1,
        arbitrary: fc.constantFrom('"', '\\', '/', '\u0000', '\u001f', '\u007f', 'é', '\u2028', '\ud800', '😀'),
      },
    ),
    minLength: 1,
    maxLength: 40,
  });
  const wireTrade = fc.record({
    market: wireText,
    asset: wireText,
    side: fc.constantFrom('BUY', 'SELL'),
    price: fc.constantFrom('0', '0.5', '0.537', '1'),
    size: fc.constantFrom('1', '250.5', '10000'),
    wallet: wireText,
    txHash: wireText,
  });
  const batchMessage = (event: WireEvent, escapeLetters: boolean): Buffer => {
    const text = encodeServerFrame({
      type: 'batch',
      frameSequence: 2,
      generation: 1,
      position: 5,
      deliveryMode: 'replay',
      sourceEventCount: 1,
      matchedEventCount: 1,
      events: [event],
    });
    return Buffer.from(escapeLetters ? text.replaceAll('A', '\\u0041') : text, 'utf8');
  };

  it('is the hash of the generic canonical JSON, whether or not the frame is plain', () => {
    let plainFrames = 0;
    fc.assert(
      fc.property(
        wireText,
        fc.constantFrom('trade', 'correction'),
        fc.integer({ min: 1, max: 2 ** 40 }),
        wireTrade,
        fc.boolean(),
        (entityId, kind, revision, data, escapeLetters) => {
          const wire = { ordinal: 1, eventId: 'e-1', kind, entityId, revision, observedAt: 't', data };
          const decoded = decodeServerFrame(batchMessage(wire, escapeLetters));
          if (decoded.frame.type !== 'batch') throw new Error('not a batch');
          const staged = toStagedEvent(decoded.frame.events[0]!, 5, 'replay', 0, undefined, decoded.plainText);
          const identity = { kind, entityId, revision, data };
          expect(staged.contentHash).toBe(`${CONTENT_IDENTITY_PREFIX}${sha256Hex(canonicalJson(identity))}`);
          if (decoded.plainText) plainFrames += 1;
        },
      ),
      { numRuns: 5_000 },
    );
    // Both paths ran: most frames are plain, and none that needed the check was taken for plain.
    expect(plainFrames).toBeGreaterThan(500);
  });

  it('is plain only for an ASCII message without a backslash', () => {
    const event = { ordinal: 1, eventId: 'e-1', kind: 'trade', entityId: 'x', revision: 1, observedAt: 't' };
    const data = { market: 'm', asset: 'a', side: 'BUY', price: '0.5', size: '2', wallet: 'w', txHash: 'h' };
    expect(decodeServerFrame(batchMessage({ ...event, data }, false)).plainText).toBe(true);
    expect(decodeServerFrame(batchMessage({ ...event, data: { ...data, wallet: 'w"' } }, false)).plainText).toBe(false);
    expect(decodeServerFrame(batchMessage({ ...event, data: { ...data, market: 'é' } }, false)).plainText).toBe(false);
    expect(decodeServerFrame(batchMessage({ ...event, data: { ...data, asset: 'A' } }, true)).plainText).toBe(false);
    // A string message (never a socket's) is not scanned.
    expect(decodeServerFrame(batchMessage({ ...event, data }, false).toString('utf8')).plainText).toBe(false);
  });
});

describe('legacyEventContentHash', () => {
  it('is byte for byte the hash the previous release stored (content plus position and ordinal)', () => {
    // The value the previous release's eventContentHash({ordinal: 2, ...content}, 7) returned.
    expect(legacyEventContentHash(content, 7, 2)).toBe(
      '7bbc06736547802c7fbd16eb62484c878949d4bd9c8ef78ee984395cc48c9d21',
    );
    expect(legacyEventContentHash(content, 7, 2)).toBe(
      sha256Hex(canonicalJson({ ...content, position: 7, ordinal: 2 })),
    );
  });
});

describe('sameContent', () => {
  const event = trade(5, 'e-1', {}, { ordinal: 2 });

  it('a current hash: equal identity, wherever either was delivered', () => {
    expect(sameContent({ contentHash: event.contentHash, position: 5, ordinal: 2 }, movedTo(event, 40, 1))).toBe(true);
    expect(sameContent({ contentHash: event.contentHash, position: 5, ordinal: 2 }, trade(5, 'e-2'))).toBe(false);
  });

  it('a legacy hash: the incoming content hashed the legacy way at the saved position and ordinal', () => {
    const saved = legacyReceipt(event);
    expect(sameContent(saved, event)).toBe(true);
    expect(sameContent(saved, movedTo(event, 40, 1))).toBe(true);
    expect(sameContent(saved, trade(5, 'e-1', { size: '101' }, { ordinal: 2 }))).toBe(false);
    expect(sameContent(saved, movedTo(trade(5, 'e-1', { size: '101' }, { ordinal: 2 }), 40, 1))).toBe(false);
  });
});

describe('decideCommit with content identity', () => {
  it('the identical event at another position is a duplicate: no effect, counted', () => {
    const first = trade(4, 'e-1', {}, { eventId: 'ev-A' });
    const first4 = decideCommit(makePlan('c', { fence: FENCE, position: 4, events: [first] }), rows());
    expect(first4.kind).toBe('committed');
    const receipt = { contentHash: first.contentHash, position: 4, ordinal: 1, outcome: 'applied' as const };
    const again = decideCommit(
      makePlan('c', { fence: FENCE, position: 9, events: [movedTo(first, 9, 2)] }),
      rows({ receipts: new Map([['ev-A', receipt]]) }),
    );
    expect(again).toMatchObject({
      kind: 'committed',
      writes: { receipts: [], executions: [], marketDeltas: [], outbox: [] },
    });
    expect(again.kind === 'committed' && again.writes.counts).toEqual({
      applied: 0,
      duplicates: 1,
      noEffect: 0,
      quarantined: 0,
      alerts: noAlerts(),
    });
    // Within one plan too: the second delivery of the same event is a duplicate, not a conflict.
    const twice = decideCommit(
      makePlan('c', { fence: FENCE, position: 9, events: [first, movedTo(first, 9, 1)] }),
      rows(),
    );
    expect(twice.kind === 'committed' && twice.writes.counts).toMatchObject({ applied: 1, duplicates: 1 });
  });

  it('the same eventId with different content at another position is a conflict naming both hashes', () => {
    const first = trade(4, 'e-1', {}, { eventId: 'ev-A' });
    const receipt = { contentHash: first.contentHash, position: 4, ordinal: 1, outcome: 'applied' as const };
    const changed = trade(9, 'e-1', { size: '101' }, { eventId: 'ev-A' });
    expect(
      decideCommit(
        makePlan('c', { fence: FENCE, position: 9, events: [changed] }),
        rows({ receipts: new Map([['ev-A', receipt]]) }),
      ),
    ).toEqual({ kind: 'conflict', eventId: 'ev-A', savedHash: first.contentHash, incomingHash: changed.contentHash });
  });

  it('a legacy receipt: the same event at its position or another is a duplicate, other content a conflict', () => {
    const first = trade(4, 'e-1', {}, { eventId: 'ev-A', ordinal: 2 });
    const saved = rows({ receipts: new Map([['ev-A', { ...legacyReceipt(first), outcome: 'applied' }]]) });
    const decide = (event: StagedEvent) =>
      decideCommit(makePlan('c', { fence: FENCE, position: event.position, events: [event] }), saved);
    for (const event of [first, movedTo(first, 12, 1)]) {
      const decision = decide(event);
      expect(decision.kind === 'committed' && decision.writes.counts.duplicates).toBe(1);
    }
    for (const event of [
      trade(4, 'e-1', { price: '0.9' }, { eventId: 'ev-A', ordinal: 2 }),
      trade(12, 'e-2', {}, { eventId: 'ev-A' }),
    ]) {
      expect(decide(event)).toMatchObject({
        kind: 'conflict',
        eventId: 'ev-A',
        savedHash: saved.receipts.get('ev-A')!.contentHash,
      });
    }
  });

  it('a held quarantine record under the legacy hash still matches its event, at any position', () => {
    const ghost = correction(6, 'ghost', 2, {}, { eventId: 'ev-G' });
    const held = rows({ quarantine: new Map([['ev-G', { ...legacyReceipt(ghost), disposition: 'held' }]]) });
    for (const event of [ghost, movedTo(ghost, 30, 1)]) {
      const decision = decideCommit(makePlan('c', { fence: FENCE, position: event.position, events: [event] }), held);
      expect(decision).toMatchObject({ kind: 'held_quarantine', held: [{ eventId: 'ev-G' }] });
    }
    const changed = correction(6, 'ghost', 3, {}, { eventId: 'ev-G' });
    expect(decideCommit(makePlan('c', { fence: FENCE, position: 6, events: [changed] }), held)).toMatchObject({
      kind: 'conflict',
      eventId: 'ev-G',
    });
  });
});

describe('toStagedEvent', () => {
  // Valid trade data in the schema's key order is staged as parsed and hashed without the shape check: the hash
  // must be the same as for the same data in any other order or with keys the trade does not read.
  const validTrade = fc.record({
    market: anyText.filter((t) => t.length > 0),
    asset: anyText.filter((t) => t.length > 0),
    side: fc.constantFrom('BUY', 'SELL'),
    price: fc.constantFrom('0', '0.5', '1', '0.123456'),
    size: fc.constantFrom('1', '2.5', '1000000.000001'),
    wallet: anyText.filter((t) => t.length > 0),
    txHash: anyText.filter((t) => t.length > 0),
  });
  const laidOut = fc
    .tuple(validTrade, fc.boolean(), fc.option(fc.jsonValue(), { nil: undefined }))
    .map(([data, reversed, extra]) => {
      const entries = Object.entries(data);
      const ordered = Object.fromEntries(reversed ? entries.reverse() : entries) as Record<string, unknown>;
      if (extra !== undefined) ordered.note = extra;
      return ordered;
    });

  it('hashes a trade or correction exactly as eventContentHash does, whatever the layout of its data', () => {
    fc.assert(
      fc.property(fc.constantFrom('trade', 'correction'), anyText, laidOut, (kind, entityId, data) => {
        const wire = { ordinal: 1, eventId: 'e1', kind, entityId: entityId || 'x', revision: 2, observedAt: '', data };
        expect(toStagedEvent(wire, 7, 'live', 0).contentHash).toBe(eventContentHash(wire));
      }),
      { numRuns: 2_000 },
    );
  });
});
