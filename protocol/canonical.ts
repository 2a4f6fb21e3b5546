// Canonical JSON and the hashes docs/protocol.md defines on it: keys sorted, no whitespace, arrays kept in order.
// Every staged event is hashed, so this is on the streaming hot path: plain loops, no per-object entry arrays or
// closures, and a trade's identity written as bytes.
import * as crypto from 'node:crypto';
import type { StreamFilter, WireEvent } from './codec.js';

export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value)) throw new TypeError('canonicalJson: non-finite number');
    if (value === undefined) throw new TypeError('canonicalJson: undefined has no JSON form');
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ',';
      // A hole of a sparse array stays empty, as Array.prototype.map + join wrote it.
      if (!(i in value)) continue;
      const item: unknown = value[i];
      out += canonicalJson(item === undefined ? null : item);
    }
    return `${out}]`;
  }
  const record = value as Record<string, unknown>;
  // The default sort compares UTF-16 code units, the same order as `<` on strings; own keys are unique.
  const keys = Object.keys(record).sort();
  let out = '{';
  let first = true;
  for (const key of keys) {
    const item = record[key];
    if (item === undefined) continue;
    if (!first) out += ',';
    first = false;
    out += `${JSON.stringify(key)}:${canonicalJson(item)}`;
  }
  return `${out}}`;
}

// One-shot crypto.hash (Node >= 20.12) skips the Hash object; older Node 20 falls back to createHash.
const oneShotHash = (crypto as { hash?: (algorithm: string, data: string | Uint8Array, encoding: 'hex') => string })
  .hash;

export function sha256Hex(text: string): string {
  return oneShotHash
    ? oneShotHash('sha256', text, 'hex')
    : crypto.createHash('sha256').update(text, 'utf8').digest('hex');
}

function sha256HexOfBytes(bytes: Uint8Array): string {
  return oneShotHash ? oneShotHash('sha256', bytes, 'hex') : crypto.createHash('sha256').update(bytes).digest('hex');
}

/** `"sha256:" + hex SHA-256 of the filter's canonical JSON`. */
export function filterHash(filter: StreamFilter): string {
  return `sha256:${sha256Hex(canonicalJson(filter))}`;
}

/** The content of an event that its identity covers: what it says, not where it was delivered. */
export type EventContent = Pick<WireEvent, 'kind' | 'entityId' | 'revision' | 'data'>;

/**
 * Marks a hash of the current content identity. A stored hash without it is a legacy one (bare hex over the
 * content plus the position and ordinal where it was delivered), written before identity excluded delivery.
 */
export const CONTENT_IDENTITY_PREFIX = 'v2:';

/**
 * Content identity of an event (docs/protocol.md §4): `v2:` + hex SHA-256 of canonicalJson({kind, entityId,
 * revision, data}). Same eventId + same identity is a duplicate, a different one a conflict.
 */
export function eventContentHash(event: EventContent): string {
  const { kind, entityId, revision, data } = event;
  if (isTradeShaped(data) && typeof kind === 'string' && typeof entityId === 'string' && Number.isFinite(revision)) {
    return tradeContentHash(kind, entityId, revision, data);
  }
  return CONTENT_IDENTITY_PREFIX + sha256Hex(contentIdentityJson(event));
}

/**
 * canonicalJson({kind, entityId, revision, data}), its four keys written in their sorted order. Trade-shaped content
 * is hashed from bytes (tradeContentHash) and comes here only when a string needs JSON's escaping or is not ASCII.
 */
export function contentIdentityJson(event: EventContent): string {
  return (
    `{"data":${canonicalJson(event.data)},"entityId":${canonicalJson(event.entityId)},` +
    `"kind":${canonicalJson(event.kind)},"revision":${canonicalJson(event.revision)}}`
  );
}

/**
 * eventContentHash of an event whose data is known to be of the trade shape (exactly its seven keys, all strings:
 * the codec returned the parsed data itself as the trade), without checking the shape again. Its canonical JSON is
 * hashed from bytes written into one reused buffer when every string is ASCII that JSON leaves as is (a stream's ids,
 * decimals and hex are): building it as a string instead allocated about 1.5 KB per event (the pieces of the
 * concatenation, then their flattened copy), a third of all the staging path allocates. `plainText`: every string
 * is known to be such ASCII (it came from a message with nothing else), so its characters are copied unchecked.
 */
export function tradeContentHash(
  kind: string,
  entityId: string,
  revision: number,
  data: TradeShape,
  plainText = false,
): string {
  const length = writeTradeIdentity(kind, entityId, revision, data, plainText ? copyAscii : writeAscii);
  const digest =
    length < 0
      ? sha256Hex(contentIdentityJson({ kind, entityId, revision, data }))
      : sha256HexOfBytes(identityView(length));
  return CONTENT_IDENTITY_PREFIX + digest;
}

// The trade identity's fixed parts, before each of its values and after the last, as bytes.
const ascii = (text: string) => Uint8Array.from(text, (c) => c.charCodeAt(0));
const BEFORE_ASSET = ascii('{"data":{"asset":"');
const BEFORE_MARKET = ascii('","market":"');
const BEFORE_PRICE = ascii('","price":"');
const BEFORE_SIDE = ascii('","side":"');
const BEFORE_SIZE = ascii('","size":"');
const BEFORE_TX_HASH = ascii('","txHash":"');
const BEFORE_WALLET = ascii('","wallet":"');
const BEFORE_ENTITY_ID = ascii('"},"entityId":"');
const BEFORE_KIND = ascii('","kind":"');
const BEFORE_REVISION = ascii('","revision":');
const AFTER_REVISION = ascii('}');
const IDENTITY_PARTS_LENGTH = [
  BEFORE_ASSET,
  BEFORE_MARKET,
  BEFORE_PRICE,
  BEFORE_SIDE,
  BEFORE_SIZE,
  BEFORE_TX_HASH,
  BEFORE_WALLET,
  BEFORE_ENTITY_ID,
  BEFORE_KIND,
  BEFORE_REVISION,
  AFTER_REVISION,
].reduce((n, part) => n + part.length, 0);

/** Reused by every trade identity written (one at a time: nothing awaits in between); grown when one does not fit. */
let identityBytes = new Uint8Array(1024);
/**
 * identityBytes' first n bytes, by n: a stream's identities come in a few lengths, and a view made per event was
 * about 80 bytes of garbage each.
 */
let identityViews: Uint8Array[] = [];

function identityView(length: number): Uint8Array {
  return (identityViews[length] ??= identityBytes.subarray(0, length));
}

/** Writes `text` at `at` as one byte per character and returns the end, or -1 where the string path must write it. */
type AsciiWriter = (bytes: Uint8Array, at: number, text: string) => number;

/**
 * Writes the trade identity's canonical JSON into identityBytes as UTF-8 and returns its length; -1, with nothing
 * to use, if `write` finds a string holding a character JSON escapes or one outside ASCII (the string path handles
 * those).
 */
function writeTradeIdentity(
  kind: string,
  entityId: string,
  revision: number,
  data: TradeShape,
  write: AsciiWriter,
): number {
  // JSON.stringify of a finite number is its String.
  const rev = String(revision);
  const { asset, market, price, side, size, txHash, wallet } = data;
  const needed =
    IDENTITY_PARTS_LENGTH +
    asset.length +
    market.length +
    price.length +
    side.length +
    size.length +
    txHash.length +
    wallet.length +
    entityId.length +
    kind.length +
    rev.length;
  if (needed > identityBytes.length) {
    identityBytes = new Uint8Array(needed * 2);
    identityViews = [];
  }
  const b = identityBytes;
  let at = 0;
  // Unrolled, with no array of the values: this runs once per event.
  if ((at = write(b, writePart(b, at, BEFORE_ASSET), asset)) < 0) return -1;
  if ((at = write(b, writePart(b, at, BEFORE_MARKET), market)) < 0) return -1;
  if ((at = write(b, writePart(b, at, BEFORE_PRICE), price)) < 0) return -1;
  if ((at = write(b, writePart(b, at, BEFORE_SIDE), side)) < 0) return -1;
  if ((at = write(b, writePart(b, at, BEFORE_SIZE), size)) < 0) return -1;
  if ((at = write(b, writePart(b, at, BEFORE_TX_HASH), txHash)) < 0) return -1;
  if ((at = write(b, writePart(b, at, BEFORE_WALLET), wallet)) < 0) return -1;
  if ((at = write(b, writePart(b, at, BEFORE_ENTITY_ID), entityId)) < 0) return -1;
  if ((at = write(b, writePart(b, at, BEFORE_KIND), kind)) < 0) return -1;
  if ((at = write(b, writePart(b, at, BEFORE_REVISION), rev)) < 0) return -1;
  return writePart(b, at, AFTER_REVISION);
}

function writePart(bytes: Uint8Array, at: number, part: Uint8Array): number {
  bytes.set(part, at);
  return at + part.length;
}

/** `text` as one byte per character at `at`; the end, or -1 if a character is not ASCII JSON leaves as is. */
function writeAscii(bytes: Uint8Array, at: number, text: string): number {
  let end = at;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    // no control character, quote, backslash or non-ASCII: JSON.stringify writes the rest as is, one byte each
    if (c < 0x20 || c > 0x7f || c === 0x22 || c === 0x5c) return -1;
    bytes[end++] = c;
  }
  return end;
}

/** writeAscii of a string known to hold only such characters, without the checks (a fifth of a trade's hash). */
function copyAscii(bytes: Uint8Array, at: number, text: string): number {
  let end = at;
  for (let i = 0; i < text.length; i++) bytes[end++] = text.charCodeAt(i);
  return end;
}

type TradeShape = Record<(typeof TRADE_KEY_NAMES)[number], string>;

/** Whether data is of the trade shape: exactly the seven keys, own and enumerable, all strings. */
function isTradeShaped(data: unknown): data is TradeShape {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return false;
  const { asset, market, price, side, size, txHash, wallet } = data as Record<string, unknown>;
  if (
    typeof asset !== 'string' ||
    typeof market !== 'string' ||
    typeof price !== 'string' ||
    typeof side !== 'string' ||
    typeof size !== 'string' ||
    typeof txHash !== 'string' ||
    typeof wallet !== 'string'
  ) {
    return false;
  }
  // Exactly the seven as own enumerable keys (what Object.keys lists), so nothing else is left to sort in.
  let own = 0;
  for (const key in data)
    if (Object.prototype.hasOwnProperty.call(data, key) && ++own > TRADE_KEY_NAMES.length) return false;
  return own === TRADE_KEY_NAMES.length && allOwnEnumerable(data);
}

const TRADE_KEY_NAMES = ['asset', 'market', 'price', 'side', 'size', 'txHash', 'wallet'] as const;

function allOwnEnumerable(data: object): boolean {
  for (const key of TRADE_KEY_NAMES) if (!Object.prototype.propertyIsEnumerable.call(data, key)) return false;
  return true;
}

/** Where a receipt or quarantine record was first saved, and the content hash it was saved with. */
export interface SavedContent {
  contentHash: string;
  position: number;
  ordinal: number;
}

/**
 * Whether an incoming event says what a saved receipt or quarantine record says. A legacy hash is compared
 * exactly, by hashing the incoming content the legacy way at the record's own position and ordinal: what was a
 * duplicate under the legacy identity stays one, what was a conflict stays one, and an event that the legacy
 * identity saw at one position is recognised at any other.
 */
export function sameContent(saved: SavedContent, event: EventContent & { contentHash: string }): boolean {
  if (saved.contentHash.startsWith(CONTENT_IDENTITY_PREFIX)) return saved.contentHash === event.contentHash;
  return saved.contentHash === legacyEventContentHash(event, saved.position, saved.ordinal);
}

/**
 * The legacy content hash, kept only to compare with receipts saved under it: hex SHA-256 of
 * canonicalJson({kind, entityId, revision, data, position, ordinal}) with its keys in sorted order.
 */
export function legacyEventContentHash(event: EventContent, position: number, ordinal: number): string {
  const fields: [string, unknown][] = [
    ['data', event.data],
    ['entityId', event.entityId],
    ['kind', event.kind],
    ['ordinal', ordinal],
    ['position', position],
    ['revision', event.revision],
  ];
  let out = '{';
  for (const [key, item] of fields) {
    if (item === undefined) continue;
    out += `${out.length > 1 ? ',' : ''}"${key}":${canonicalJson(item)}`;
  }
  return sha256Hex(`${out}}`);
}
