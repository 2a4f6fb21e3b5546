// Array parameters as Postgres array literals, built here instead of by pg's generic prepareValue, which walks
// every element through type checks and two regex replacements: for the thousand-row arrays of a commit that
// encoding cost more client CPU than deciding the commit. Same text, same server-side parse.

/**
 * `{"a","b",NULL}`: every element quoted, so no element can read as NULL or need a whitespace rule; null is NULL.
 * Built by one join when no element needs escaping, the common case: concatenating element by element builds a
 * deep tree of string pieces that costs more to flatten, when the query is written, than building it did.
 */
export function textArray(values: readonly (string | null)[]): string {
  for (let i = 0; i < values.length; i++) {
    const value = values[i]!;
    if (value === null || value.indexOf('"') !== -1 || value.indexOf('\\') !== -1) return escapedTextArray(values);
  }
  return values.length === 0 ? '{}' : `{"${values.join('","')}"}`;
}

function escapedTextArray(values: readonly (string | null)[]): string {
  const elements = new Array<string>(values.length);
  for (let i = 0; i < values.length; i++) {
    const value = values[i]!;
    elements[i] = value === null ? 'NULL' : `"${value.replace(ESCAPED, '\\$&')}"`;
  }
  return `{${elements.join(',')}}`;
}

/** `{1,2}`: safe integers and decimal strings need no quoting. */
export function numberArray(values: readonly (number | string)[]): string {
  return `{${values.join(',')}}`;
}

const ESCAPED = /["\\]/g;
