// The commit's binary array parameters (db/pg-arrays.ts) must reach Postgres as exactly the arrays they were
// built from: every string (quotes, backslashes, commas, braces, any Unicode), NULLs, empty arrays, and integers
// up to the ends of their types.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { binaryBigintArray, binaryIntArray, binaryTextArray } from '../../db/pg-arrays.js';
import { useTestDatabase } from '../support/db.js';

const db = useTestDatabase();

/** What Postgres reads from the parameters, returned as text so that no parser of ours or pg's stands between. */
async function roundTrip(text: Buffer, ints: Buffer, bigints: Buffer) {
  const { rows } = await db.pool.query<{ text: string | null; ints: string; bigints: string; lengths: string }>(
    `SELECT array_to_json($1::text[])::text AS text, array_to_json($2::int[])::text AS ints,
            array_to_json($3::bigint[])::text AS bigints,
            concat_ws(',', cardinality($1::text[]), cardinality($2::int[]), cardinality($3::bigint[])) AS lengths`,
    [text, ints, bigints],
  );
  return rows[0]!;
}

// Postgres text holds no NUL character; everything else must come through.
const text = fc.oneof(
  fc.string({ unit: 'grapheme' }),
  fc.string({ unit: 'binary' }).map((s) => s.replaceAll('\0', '')),
  fc.constantFrom('"', '\\', '","', '{a,b}', 'NULL', '', ' x ', 'é', '鯨', '🐋', 'a"b\\c'),
);
// A lone surrogate cannot be encoded as UTF-8; Buffer.write replaces it, as pg's own encoding would.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const wellFormed = text.filter((s) => !LONE_SURROGATE.test(s));

describe('binary array parameters', () => {
  it('Postgres reads back exactly the strings, NULLs and integers written', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.option(wellFormed, { nil: null }), { maxLength: 20 }),
        fc.array(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { maxLength: 20 }),
        fc.array(fc.oneof(fc.maxSafeInteger(), fc.constantFrom(0, -1, 2 ** 32, -(2 ** 32), 2 ** 53 - 1)), {
          maxLength: 20,
        }),
        async (strings, ints, bigints) => {
          const row = await roundTrip(binaryTextArray(strings), binaryIntArray(ints), binaryBigintArray(bigints));
          expect(row.lengths).toBe([strings.length, ints.length, bigints.length].join(','));
          expect(row.text === null ? [] : JSON.parse(row.text)).toEqual(strings);
          expect(JSON.parse(row.ints)).toEqual(ints);
          // JSON numbers past 2^53 would lose digits: compare the digits as Postgres wrote them
          expect(row.bigints).toBe(JSON.stringify(bigints));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('writes a string that is longer in UTF-8 than in characters whole, wherever it stands in the array', async () => {
    // The ASCII fast path writes into a buffer sized for ASCII and must notice such a string, even the last one.
    const arrays = [
      ['a', 'b', '€'.repeat(50)],
      ['🐋'.repeat(30)],
      ['x'.repeat(100), 'é'],
      ['€'.repeat(50), 'é'.repeat(50), '€'.repeat(50)],
      ['id-1', null, 'aé€🐋', 'plain'],
    ];
    for (const strings of arrays) {
      const row = await roundTrip(binaryTextArray(strings), binaryIntArray([]), binaryBigintArray([]));
      expect(JSON.parse(row.text!)).toEqual(strings);
    }
  });

  it('writes arrays of short ASCII strings, the joined form, exactly, up to and past its length limit', async () => {
    // binaryTextArray writes such an array in one piece, each element's length as four ASCII characters; any
    // element of 128 characters or more, any NULL or any character outside ASCII sends it back element by element.
    const ascii = fc.string({ unit: fc.integer({ min: 1, max: 0x7f }).map((c) => String.fromCharCode(c)) });
    const atTheLimit = fc.constantFrom('a'.repeat(126), 'b'.repeat(127), 'c'.repeat(128), 'd'.repeat(300), 'é', '');
    await fc.assert(
      fc.asyncProperty(fc.array(fc.oneof(ascii, ascii, atTheLimit), { maxLength: 30 }), async (strings) => {
        const row = await roundTrip(binaryTextArray(strings), binaryIntArray([]), binaryBigintArray([]));
        expect(row.lengths).toBe(`${strings.length},0,0`);
        expect(row.text === null ? [] : JSON.parse(row.text)).toEqual(strings);
      }),
      { numRuns: 200 },
    );
  });

  it('refuses a value its column type cannot carry instead of writing another', () => {
    expect(() => binaryIntArray([2 ** 31])).toThrow(RangeError);
    expect(() => binaryIntArray([1.5])).toThrow(RangeError);
    expect(() => binaryBigintArray([Number.NaN])).toThrow(RangeError);
    expect(() => binaryBigintArray([2 ** 53])).toThrow(RangeError);
  });
});
