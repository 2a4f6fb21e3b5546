// The codec decodes well-formed `batch` frames and trade data by hand (the hot path) and leaves everything
// else to zod. These properties hold the two paths to one meaning: for any input, valid or not, the result
// equals what the zod schema alone gives — the same value with keys in the same order, or a WireError.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeServerFrame,
  parseTradeData,
  serverFrameSchema,
  tradeDataSchema,
  WireError,
} from '../../protocol/codec.js';

const oddValue = fc.constantFrom<unknown>(
  -1,
  0,
  1.5,
  2 ** 60,
  '',
  'x',
  '1e3',
  '-0.5',
  '1.5',
  null,
  true,
  [],
  {},
  { a: 1 },
);

const tradeData = fc.record({
  market: fc.constantFrom('will-it-rain', 'fed-cut-2026'),
  asset: fc.constantFrom('0xabc', '0xdef'),
  side: fc.constantFrom('BUY', 'SELL'),
  price: fc.constantFrom('0', '0.5', '0.537', '1', '1.0'),
  size: fc.constantFrom('1', '250.5', '10000'),
  wallet: fc.constantFrom('0xwhale', '0xsmall'),
  txHash: fc.constantFrom('0x01', '0xff'),
});

/** Replaces, deletes, adds or moves to the end one key of an object (or leaves it alone). */
function mutated<T extends Record<string, unknown>>(base: fc.Arbitrary<T>): fc.Arbitrary<Record<string, unknown>> {
  return fc
    .tuple(base, fc.nat(), fc.constantFrom('keep', 'replace', 'delete', 'add', 'reorder'), oddValue)
    .map(([value, index, how, odd]) => {
      const copy: Record<string, unknown> = { ...value };
      const keys = Object.keys(copy);
      const key = keys[index % keys.length]!;
      if (how === 'replace') copy[key] = odd;
      if (how === 'delete') delete copy[key];
      if (how === 'add') copy.unexpected = odd;
      if (how === 'reorder') {
        const moved = copy[key];
        delete copy[key];
        copy[key] = moved;
      }
      return copy;
    });
}

const wireEvent = fc.record({
  ordinal: fc.integer({ min: 1, max: 5 }),
  eventId: fc.constantFrom('e1', 'e2'),
  kind: fc.constantFrom('trade', 'correction', 'mystery'),
  entityId: fc.constantFrom('x1', 'x2'),
  revision: fc.integer({ min: 1, max: 3 }),
  observedAt: fc.constantFrom('2026-11-29T10:00:00Z', ''),
  data: tradeData,
});

const batchFrame = fc.record({
  v: fc.constant(1),
  type: fc.constant('batch'),
  frameSequence: fc.integer({ min: 1, max: 100 }),
  generation: fc.integer({ min: 1, max: 3 }),
  position: fc.integer({ min: 1, max: 1000 }),
  deliveryMode: fc.constantFrom('replay', 'live'),
  sourceEventCount: fc.integer({ min: 1, max: 5 }),
  matchedEventCount: fc.integer({ min: 0, max: 5 }),
  events: fc.array(fc.oneof(wireEvent, mutated(wireEvent)), { maxLength: 4 }),
});

function zodOutcome(schema: { safeParse(v: unknown): { success: boolean; data?: unknown } }, value: unknown): string {
  const result = schema.safeParse(value);
  return result.success ? JSON.stringify(result.data) : 'invalid';
}

describe('codec fast paths agree with the zod schemas', () => {
  it('decodeServerFrame gives what serverFrameSchema gives, for valid and broken batch frames alike', () => {
    fc.assert(
      fc.property(fc.oneof(batchFrame, mutated(batchFrame)), (frame) => {
        const text = JSON.stringify(frame);
        const expected = zodOutcome(serverFrameSchema, JSON.parse(text));
        let actual: string;
        try {
          actual = JSON.stringify(decodeServerFrame(text).frame);
        } catch (error) {
          expect(error).toBeInstanceOf(WireError);
          actual = 'invalid';
        }
        expect(actual).toBe(expected);
      }),
      { numRuns: 4000 },
    );
  });

  it('parseTradeData gives what tradeDataSchema gives, and names the field when it refuses', () => {
    fc.assert(
      fc.property(fc.oneof(tradeData, mutated(tradeData)), (data) => {
        const expected = zodOutcome(tradeDataSchema, data);
        let actual: string;
        try {
          actual = JSON.stringify(parseTradeData('trade', data));
        } catch (error) {
          expect(error).toBeInstanceOf(WireError);
          expect((error as WireError).field).toMatch(/^events\.data\./);
          actual = 'invalid';
        }
        expect(actual).toBe(expected);
      }),
      { numRuns: 2000 },
    );
  });
});
