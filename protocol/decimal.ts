// Exact decimal arithmetic on plain-notation strings, via BigInt. Money never touches binary floating point.

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
  let digits = (negative ? -d.units : d.units).toString().padStart(d.scale + 1, '0');
  let scale = d.scale;
  while (scale > 0 && digits.endsWith('0')) {
    digits = digits.slice(0, -1);
    scale -= 1;
  }
  const whole = digits.slice(0, digits.length - scale);
  const fraction = digits.slice(digits.length - scale);
  const body = scale > 0 ? `${whole}.${fraction}` : whole;
  return negative && body !== '0' ? `-${body}` : body;
}

/** price * size, as a normalised decimal string. */
export function notional(price: string, size: string): string {
  return formatDecimal(mulDecimal(parseDecimal(price), parseDecimal(size)));
}
