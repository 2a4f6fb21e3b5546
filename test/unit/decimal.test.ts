import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  addDecimal,
  addExact,
  compareDecimal,
  compareExact,
  formatDecimal,
  formatExact,
  isZeroExact,
  mulDecimal,
  mulExact,
  negateExact,
  notional,
  parseExact,
  parseDecimal,
  subDecimal,
} from '../../protocol/decimal.js';

const decimalText = fc
  .tuple(fc.bigInt({ min: 0n, max: 10n ** 12n }), fc.integer({ min: 0, max: 8 }))
  .map(([units, scale]) => formatDecimal({ units, scale }));

describe('decimal', () => {
  it('multiplies money exactly where binary floats do not', () => {
    expect(notional('0.1', '3')).toBe('0.3');
    expect(notional('0.57', '1234.56')).toBe('703.6992');
    expect(0.57 * 1234.56).not.toBe(703.6992);
  });

  it('normalises and round-trips plain notation', () => {
    expect(formatDecimal(parseDecimal('1.500'))).toBe('1.5');
    expect(formatDecimal(parseDecimal('0.000'))).toBe('0');
    expect(formatDecimal(subDecimal(parseDecimal('1'), parseDecimal('2.25')))).toBe('-1.25');
    expect(() => parseDecimal('1e5')).toThrow(/not a decimal/);
  });

  it('adding then subtracting returns the original value', () => {
    fc.assert(
      fc.property(decimalText, decimalText, (a, b) => {
        const sum = addDecimal(parseDecimal(a), parseDecimal(b));
        expect(compareDecimal(subDecimal(sum, parseDecimal(b)), parseDecimal(a))).toBe(0);
        expect(formatDecimal(parseDecimal(formatDecimal(sum)))).toBe(formatDecimal(sum));
      }),
    );
  });
});

/** Decimals on both sides of the safe-integer boundary of the Number fast path, signed, scales 0..18. */
const wideText = fc
  .tuple(
    fc.oneof(
      fc.bigInt({ min: -(10n ** 6n), max: 10n ** 6n }),
      fc.bigInt({ min: -(2n ** 53n) - 10n, max: 2n ** 53n + 10n }),
      fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }),
    ),
    fc.integer({ min: 0, max: 18 }),
  )
  .map(([units, scale]) => formatDecimal({ units, scale }));

describe('ExactDecimal (the hot path) against the BigInt Decimal', () => {
  it('parses, adds, subtracts, multiplies, compares and formats to the same values', () => {
    fc.assert(
      fc.property(wideText, wideText, (a, b) => {
        const [x, y] = [parseExact(a), parseExact(b)];
        const [bx, by] = [parseDecimal(a), parseDecimal(b)];
        expect(formatExact(x)).toBe(formatDecimal(bx));
        expect(formatExact(addExact(x, y))).toBe(formatDecimal(addDecimal(bx, by)));
        expect(formatExact(addExact(x, negateExact(y)))).toBe(formatDecimal(subDecimal(bx, by)));
        expect(formatExact(mulExact(x, y))).toBe(formatDecimal(mulDecimal(bx, by)));
        expect(compareExact(x, y)).toBe(compareDecimal(bx, by));
        expect(isZeroExact(addExact(x, negateExact(y)))).toBe(compareDecimal(bx, by) === 0);
      }),
      { numRuns: 3_000 },
    );
  });

  it('keeps units a safe integer or a BigInt, never an inexact Number', () => {
    fc.assert(
      fc.property(wideText, wideText, (a, b) => {
        for (const d of [parseExact(a), mulExact(parseExact(a), parseExact(b)), addExact(parseExact(a), parseExact(b))])
          expect(typeof d.units === 'bigint' || Number.isSafeInteger(d.units)).toBe(true);
      }),
    );
  });

  it('refuses what parseDecimal refuses', () => {
    for (const text of ['', '-', '1.', '.5', '1e5', '1.2.3', ' 1', '+1', '0x10', '1_000'])
      expect(() => parseExact(text)).toThrow(/not a decimal/);
  });
});
