// The commit statements' array parameters are built by hand (db/pg-arrays.ts) for speed; Postgres must read them
// exactly as it reads pg's own encoding of the same arrays, escapes and NULLs included.
import fc from 'fast-check';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { textArray } from '../../db/pg-arrays.js';

const { prepareValue } = createRequire(import.meta.url)('pg/lib/utils') as { prepareValue: (v: unknown) => unknown };

describe('array parameters', () => {
  it('textArray writes what pg writes for any strings and NULLs', () => {
    const text = fc.oneof(fc.string(), fc.string({ unit: 'grapheme' }), fc.constantFrom('"', '\\', '","', 'a"b\\c'));
    fc.assert(
      fc.property(fc.array(fc.option(text, { nil: null }), { maxLength: 30 }), (values) => {
        expect(textArray(values)).toBe(prepareValue(values));
      }),
      { numRuns: 2000 },
    );
  });
});
