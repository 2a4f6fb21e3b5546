// Exact decimal arithmetic on plain-notation strings. Money never touches binary floating point as a fraction:
// Decimal holds BigInt units; ExactDecimal (the per-event hot path) holds integer units in a Number while they
// are a safe integer, where integer arithmetic is exact, and moves to BigInt only when a result would not be.

const DECIMAL = /^(-)?(\d+)(?:\.(\d+))?$/;

/** A decimal as an integer of units times 10^-scale. */
export interface Decimal {
  readonly units: bigint;
  readonly scale: number;
}

export function parseDecimal(text: string): Decimal {
  const m = DECIMAL.exec(text);
  if (!m) throw new RangeError(`not a decimal string: ${JSON.stringify(text)}`);
  const fraction = m[3] ?? '';
  const units = BigInt(`${m[2]}${fraction}`);
  return { units: m[1] ? -units : units, scale: fraction.length };
}

function rescale(d: Decimal, scale: number): bigint {
  return d.units * 10n ** BigInt(scale - d.scale);
}

export function addDecimal(a: Decimal, b: Decimal): Decimal {
  const scale = Math.max(a.scale, b.scale);
  return { units: rescale(a, scale) + rescale(b, scale), scale };
}

export function subDecimal(a: Decimal, b: Decimal): Decimal {
  return addDecimal(a, { units: -b.units, scale: b.scale });
}

export function mulDecimal(a: Decimal, b: Decimal): Decimal {
  return { units: a.units * b.units, scale: a.scale + b.scale };
}

export function compareDecimal(a: Decimal, b: Decimal): -1 | 0 | 1 {
  const scale = Math.max(a.scale, b.scale);
  const x = rescale(a, scale);
  const y = rescale(b, scale);
  return x < y ? -1 : x > y ? 1 : 0;
}

/** Plain notation with trailing fractional zeros removed ("1.50" -> "1.5", "2.000" -> "2"). */
export function formatDecimal(d: Decimal): string {
  const negative = d.units < 0n;
  return formatDigits(negative, (negative ? -d.units : d.units).toString(), d.scale);
}

function formatDigits(negative: boolean, magnitude: string, scale: number): string {
  const digits = magnitude.length > scale ? magnitude : magnitude.padStart(scale + 1, '0');
  let end = digits.length;
  const wholeEnd = end - scale;
  while (end > wholeEnd && digits.charCodeAt(end - 1) === 48 /* 0 */) end -= 1;
  const whole = digits.slice(0, wholeEnd);
  const body = end > wholeEnd ? `${whole}.${digits.slice(wholeEnd, end)}` : whole;
  return negative && body !== '0' ? `-${body}` : body;
}

/** A decimal as integer units times 10^-scale; units is a Number only while it is a safe integer. */
export interface ExactDecimal {
  readonly units: number | bigint;
  readonly scale: number;
}

export const EXACT_ZERO: ExactDecimal = { units: 0, scale: 0 };

/** Up to 15 digits always make a safe integer (10^15 < 2^53). */
const SAFE_DIGITS = 15;
const POW10 = Array.from({ length: SAFE_DIGITS + 1 }, (_, i) => 10 ** i);

/** Parses like parseDecimal (the same strings, the same RangeError), into Number units when they fit. */
export function parseExact(text: string): ExactDecimal {
  const n = text.length;
  let i = text.charCodeAt(0) === 45 /* - */ ? 1 : 0;
  const negative = i === 1;
  let units = 0;
  let digits = 0;
  let scale = -1;
  for (; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      units = units * 10 + (c - 48);
      digits += 1;
      if (scale >= 0) scale += 1;
    } else if (c === 46 /* . */ && scale < 0 && digits > 0) {
      scale = 0;
    } else {
      return parseDecimal(text);
    }
  }
  // No digit, a trailing point, or more digits than a Number holds exactly: the BigInt parser decides.
  if (digits === 0 || scale === 0 || digits > SAFE_DIGITS) return parseDecimal(text);
  return { units: negative ? -units : units, scale: scale < 0 ? 0 : scale };
}

const big = (units: number | bigint): bigint => (typeof units === 'bigint' ? units : BigInt(units));

/**
 * units × 10^by. A product of integers whose true value is a safe integer is computed exactly in a Number;
 * one that is not rounds to at least 2^53, which is not safe, so it is redone in BigInt.
 */
function scaleUp(units: number | bigint, by: number): number | bigint {
  if (by === 0) return units;
  if (typeof units === 'number' && by <= SAFE_DIGITS) {
    const r = units * POW10[by]!;
    if (Number.isSafeInteger(r)) return r;
  }
  return big(units) * 10n ** BigInt(by);
}

export function mulExact(a: ExactDecimal, b: ExactDecimal): ExactDecimal {
  const scale = a.scale + b.scale;
  if (typeof a.units === 'number' && typeof b.units === 'number') {
    const r = a.units * b.units;
    if (Number.isSafeInteger(r)) return { units: r, scale };
  }
  return { units: big(a.units) * big(b.units), scale };
}

export function addExact(a: ExactDecimal, b: ExactDecimal): ExactDecimal {
  const scale = a.scale > b.scale ? a.scale : b.scale;
  const x = scaleUp(a.units, scale - a.scale);
  const y = scaleUp(b.units, scale - b.scale);
  if (typeof x === 'number' && typeof y === 'number') {
    // Both safe: the sum is exact unless its true value leaves the safe range, which rounding cannot hide.
    const r = x + y;
    if (Number.isSafeInteger(r)) return { units: r, scale };
  }
  return { units: big(x) + big(y), scale };
}

export function negateExact(a: ExactDecimal): ExactDecimal {
  return { units: -a.units, scale: a.scale };
}

export function compareExact(a: ExactDecimal, b: ExactDecimal): -1 | 0 | 1 {
  const scale = a.scale > b.scale ? a.scale : b.scale;
  const x = scaleUp(a.units, scale - a.scale);
  const y = scaleUp(b.units, scale - b.scale);
  if (typeof x === 'number' && typeof y === 'number') return x < y ? -1 : x > y ? 1 : 0;
  const bx = big(x);
  const by = big(y);
  return bx < by ? -1 : bx > by ? 1 : 0;
}

export function isZeroExact(a: ExactDecimal): boolean {
  return typeof a.units === 'number' ? a.units === 0 : a.units === 0n;
}

/** Plain notation like formatDecimal. */
export function formatExact(d: ExactDecimal): string {
  if (typeof d.units === 'bigint') return formatDecimal(d as Decimal);
  const negative = d.units < 0;
  // A safe integer's String is its plain digits (exponents start at 1e21).
  return formatDigits(negative, String(negative ? -d.units : d.units), d.scale);
}

/** price * size, as a normalised decimal string. */
export function notional(price: string, size: string): string {
  return formatExact(mulExact(parseExact(price), parseExact(size)));
}
