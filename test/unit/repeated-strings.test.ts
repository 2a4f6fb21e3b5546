// RepeatedStrings shares one instance per value among staged events (its saving is measured by the stream bench:
// scavenged bytes per event). What a user relies on here: a value comes back unchanged, and the pool stays bounded
// whatever a feed's values are.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RepeatedStrings } from '../../protocol/repeated-strings.js';

describe('RepeatedStrings', () => {
  it('gives back every value as it was, and holds at most twice its capacity', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 8 }),
        fc.array(fc.string({ maxLength: 3 }), { maxLength: 200 }),
        (capacity, values) => {
          const repeated = new RepeatedStrings(capacity);
          for (const value of values) {
            expect(repeated.share(value)).toBe(value);
            expect(repeated.size).toBeLessThanOrEqual(2 * capacity);
          }
        },
      ),
    );
  });

  it('holds a repeating value once: a feed of few markets keeps the pool as small as they are', () => {
    const repeated = new RepeatedStrings(100);
    for (let i = 0; i < 10_000; i++) repeated.share(`market-${i % 7}`);
    expect(repeated.size).toBe(7);
  });
});
