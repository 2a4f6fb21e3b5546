// Array parameters as Postgres array literals, built here instead of by pg's generic prepareValue, which walks
// every element through type checks and two regex replacements: for the thousand-row arrays of a commit that
// encoding cost more client CPU than deciding the commit. Same text, same server-side parse.

/** `{"a","b",NULL}`: every element quoted, so no element can read as NULL or need a whitespace rule; null is NULL. */
export function textArray(values: readonly (string | null)[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    const value = values[i]!;
    if (i > 0) out += ',';
    if (value === null) out += 'NULL';
    else out += NEEDS_ESCAPE.test(value) ? `"${value.replace(ESCAPED, '\\$&')}"` : `"${value}"`;
  }
  return `${out}}`;
}

/** `{1,2}`: safe integers and decimal strings need no quoting. */
export function numberArray(values: readonly (number | string)[]): string {
  return `{${values.join(',')}}`;
}

const NEEDS_ESCAPE = /["\\]/;
const ESCAPED = /["\\]/g;
