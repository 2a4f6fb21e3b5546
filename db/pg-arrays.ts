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

// ---- Binary arrays: a Buffer parameter goes to Postgres in the binary format (pg sends every Buffer so), which
// the server reads with array_recv: no quoting or escaping to write and none to parse, and no second pass by pg
// over a text to measure and encode it. The commit's thousand-row text and integer columns travel so; a worker
// profile had spent more on the text arrays and pg's encoding of them than on deciding the commit. The layout:
// ndim, has-nulls flag, element type OID, then per dimension its length and lower bound, then each element as
// its byte length (-1 for NULL) and bytes. The statement's cast ($n::text[]) names the type Postgres expects,
// and it checks the element OID against it.

const TEXT_OID = 25;
const BYTEA_OID = 17;
const INT4_OID = 23;
const INT8_OID = 20;
const HEADER_BYTES = 20;
const TWO_TO_32 = 4_294_967_296;

const INT4_MIN = -2_147_483_648;
const INT4_MAX = 2_147_483_647;

/**
 * A 32-bit big-endian integer at `offset`, as Buffer.writeInt32BE writes it, without that method's argument and
 * range checks: it runs several times per element, and every value here is one the caller checked or built.
 * A typed array keeps each byte's low 8 bits, and `>>>` reads the value as 32 bits, so a negative one comes out
 * in two's complement.
 */
function int32At(buffer: Buffer, offset: number, value: number): void {
  buffer[offset] = value >>> 24;
  buffer[offset + 1] = value >>> 16;
  buffer[offset + 2] = value >>> 8;
  buffer[offset + 3] = value;
}

function writeHeader(buffer: Buffer, elements: number, hasNull: boolean, elementOid: number): void {
  int32At(buffer, 0, 1);
  int32At(buffer, 4, hasNull ? 1 : 0);
  int32At(buffer, 8, elementOid);
  int32At(buffer, 12, elements);
  int32At(buffer, 16, 1);
}

/** An empty array has no dimension, and Postgres refuses a parameter with bytes it did not read. */
function emptyArray(elementOid: number): Buffer {
  const buffer = Buffer.alloc(12);
  int32At(buffer, 8, elementOid);
  return buffer;
}

/**
 * Buffer.prototype.utf8Write: the native UTF-8 writer behind Buffer.write, without its argument parsing (which cost
 * a quarter of this encoding). Node has it in every release this project supports, though @types/node does not
 * declare it; it returns the bytes written.
 */
const nativeUtf8Write = (
  Buffer.prototype as unknown as { utf8Write: (this: Buffer, text: string, offset: number) => number }
).utf8Write;
const utf8Write = (buffer: Buffer, text: string, offset: number): number => nativeUtf8Write.call(buffer, text, offset);

/** A `text[]` parameter in the binary format; NULL elements allowed. */
export function binaryTextArray(values: readonly (string | null)[]): Buffer {
  if (values.length === 0) return emptyArray(TEXT_OID);
  return joinedTextArray(values) ?? elementwiseTextArray(values);
}

/** Elements shorter than this have a length whose four bytes are ASCII: three NULs and the length itself. */
const JOINABLE_LENGTH = 128;
const LENGTH_PREFIX = Array.from({ length: JOINABLE_LENGTH }, (_, n) => `\0\0\0${String.fromCharCode(n)}`);

/**
 * The common case in ONE native write: every element present, ASCII and shorter than JOINABLE_LENGTH. Each
 * element's length prefix is then four ASCII characters, so the prefixes and elements join into one string whose
 * UTF-8 is exactly the array's body. A native write per element cost more than the copy it made: in a warmed loop
 * over a commit's columns, 110 to 171 ns per element against 72 to 100 joined. Null when some element does not
 * qualify.
 */
function joinedTextArray(values: readonly (string | null)[]): Buffer | null {
  const parts = new Array<string>(2 * values.length);
  for (let i = 0; i < values.length; i++) {
    const value = values[i]!;
    if (value === null || value.length >= JOINABLE_LENGTH) return null;
    parts[2 * i] = LENGTH_PREFIX[value.length]!;
    parts[2 * i + 1] = value;
  }
  const body = parts.join('');
  // A body that is not all ASCII comes out longer in UTF-8 than in characters. With four bytes of room past its
  // length, the writer either writes it whole (more bytes than characters) or stops for want of room for a
  // character of at most four bytes, having written more than the characters: equal means ASCII, written whole.
  const buffer = Buffer.allocUnsafe(HEADER_BYTES + body.length + 4);
  const bytes = utf8Write(buffer, body, HEADER_BYTES);
  if (bytes !== body.length) return null;
  writeHeader(buffer, values.length, false, TEXT_OID);
  return buffer.subarray(0, HEADER_BYTES + bytes);
}

/** binaryTextArray element by element: NULLs, long strings, strings outside ASCII. */
function elementwiseTextArray(values: readonly (string | null)[]): Buffer {
  // Sized for ASCII, the common case, with room for the first element that is not: every string is written by
  // Buffer's native UTF-8 writer (a third cheaper than copying its characters one by one in a loop here), and one
  // that comes out longer in bytes than in characters sends the whole array to the general writer. The room (two
  // bytes more per character of the longest string: UTF-8 takes at most three per UTF-16 unit) keeps that string
  // whole, so its byte count cannot come out equal to its length by truncation.
  let total = HEADER_BYTES;
  let longest = 0;
  for (let i = 0; i < values.length; i++) {
    const length = values[i]?.length ?? 0;
    total += 4 + length;
    if (length > longest) longest = length;
  }
  const buffer = Buffer.allocUnsafe(total + 2 * longest);
  const end = writeTextElements(buffer, values, true);
  return end < 0 ? utf8TextArray(values) : buffer.subarray(0, end);
}

/** binaryTextArray of an array with a string outside ASCII: each string measured, and written, as UTF-8. */
function utf8TextArray(values: readonly (string | null)[]): Buffer {
  let total = HEADER_BYTES;
  for (let i = 0; i < values.length; i++) {
    const value = values[i]!;
    total += 4 + (value === null ? 0 : Buffer.byteLength(value, 'utf8'));
  }
  const buffer = Buffer.allocUnsafe(total);
  writeTextElements(buffer, values, false);
  return buffer;
}

/**
 * The header and every element of a `text[]` into `buffer`; the end offset, or -1 as soon as a string is not
 * ASCII when `asciiOnly` (the buffer is then sized for ASCII, and its contents are not to be used).
 */
function writeTextElements(buffer: Buffer, values: readonly (string | null)[], asciiOnly: boolean): number {
  let offset = HEADER_BYTES;
  let hasNull = false;
  for (let i = 0; i < values.length; i++) {
    const value = values[i]!;
    if (value === null) {
      int32At(buffer, offset, -1);
      offset += 4;
      hasNull = true;
      continue;
    }
    const bytes = utf8Write(buffer, value, offset + 4);
    if (asciiOnly && bytes !== value.length) return -1;
    int32At(buffer, offset, bytes);
    offset += 4 + bytes;
  }
  writeHeader(buffer, values.length, hasNull, TEXT_OID);
  return offset;
}

/**
 * A `bytea[]` parameter in the binary format, no NULLs: element i is `byteLength(i)` bytes, which `write` puts at
 * `offset` and counts in its answer. The caller writes its elements straight into the array, not into a Buffer of
 * their own each.
 */
export function binaryByteaArray(
  count: number,
  byteLength: (index: number) => number,
  write: (buffer: Buffer, offset: number, index: number) => number,
): Buffer {
  if (count === 0) return emptyArray(BYTEA_OID);
  let total = HEADER_BYTES;
  for (let i = 0; i < count; i++) total += 4 + byteLength(i);
  const buffer = Buffer.allocUnsafe(total);
  writeHeader(buffer, count, false, BYTEA_OID);
  let offset = HEADER_BYTES;
  for (let i = 0; i < count; i++) {
    const bytes = write(buffer, offset + 4, i);
    int32At(buffer, offset, bytes);
    offset += 4 + bytes;
  }
  return buffer;
}

/**
 * Buffer.prototype.hexWrite: the native hex decoder behind Buffer.write, without that method's argument parsing (as
 * utf8Write above). It stops at the first pair that is not hex and returns the bytes written.
 */
const nativeHexWrite = (
  Buffer.prototype as unknown as { hexWrite: (this: Buffer, hex: string, offset: number, length: number) => number }
).hexWrite;
export const hexWrite = (buffer: Buffer, hex: string, offset: number, length: number): number =>
  nativeHexWrite.call(buffer, hex, offset, length);

/**
 * A `bytea[]` parameter in the binary format whose `count` elements are each `elementBytes` bytes: `leadHex` (the
 * same for all) followed by `restHex(index)`, in hex. Decoded by ONE native hex write of the joined elements and
 * their length prefixes, where binaryByteaArray's writer makes one call per element. Null, and nothing to use,
 * when some `restHex` is null or not of the length that makes `elementBytes`, or the whole is not hex.
 */
export function joinedHexByteaArray(
  count: number,
  elementBytes: number,
  leadHex: string,
  restHex: (index: number) => string | null,
): Buffer | null {
  if (count === 0) return emptyArray(BYTEA_OID);
  const head = elementBytes.toString(16).padStart(8, '0') + leadHex;
  const restLength = 2 * elementBytes - leadHex.length;
  const parts = new Array<string>(2 * count);
  for (let i = 0; i < count; i++) {
    const rest = restHex(i);
    if (rest === null || rest.length !== restLength) return null;
    parts[2 * i] = head;
    parts[2 * i + 1] = rest;
  }
  const body = count * (4 + elementBytes);
  const buffer = Buffer.allocUnsafe(HEADER_BYTES + body);
  // hexWrite stops at the first pair that is not hex: fewer bytes than the body means some element was not.
  if (hexWrite(buffer, parts.join(''), HEADER_BYTES, body) !== body) return null;
  writeHeader(buffer, count, false, BYTEA_OID);
  return buffer;
}

/** An `int[]` parameter in the binary format (32-bit integers; RangeError otherwise). */
export function binaryIntArray(values: readonly number[]): Buffer {
  if (values.length === 0) return emptyArray(INT4_OID);
  const buffer = Buffer.allocUnsafe(HEADER_BYTES + values.length * 8);
  writeHeader(buffer, values.length, false, INT4_OID);
  let offset = HEADER_BYTES;
  for (let i = 0; i < values.length; i++) {
    const value = checkedInteger(values[i]!);
    if (value < INT4_MIN || value > INT4_MAX) throw new RangeError(`${value} does not fit a 32-bit integer`);
    int32At(buffer, offset, 4);
    int32At(buffer, offset + 4, value);
    offset += 8;
  }
  return buffer;
}

/** A `bigint[]` parameter in the binary format (safe integers; RangeError otherwise). */
export function binaryBigintArray(values: readonly number[]): Buffer {
  if (values.length === 0) return emptyArray(INT8_OID);
  const buffer = Buffer.allocUnsafe(HEADER_BYTES + values.length * 12);
  writeHeader(buffer, values.length, false, INT8_OID);
  let offset = HEADER_BYTES;
  for (let i = 0; i < values.length; i++) {
    const value = checkedInteger(values[i]!);
    // Two's complement over 64 bits from a safe integer: the high word floors, the low word is what remains.
    const high = Math.floor(value / TWO_TO_32);
    int32At(buffer, offset, 8);
    int32At(buffer, offset + 4, high);
    int32At(buffer, offset + 8, value - high * TWO_TO_32);
    offset += 12;
  }
  return buffer;
}

/** int32At would write NaN or a fraction silently: a value here is a safe integer or an error. */
function checkedInteger(value: number): number {
  if (!Number.isSafeInteger(value)) throw new RangeError(`${value} is not an integer an array parameter can carry`);
  return value;
}
