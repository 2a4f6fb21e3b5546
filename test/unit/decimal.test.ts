import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  addDecimal,
  compareDecimal,
  formatDecimal,
  notional,
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
