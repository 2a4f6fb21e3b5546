// Canonical JSON and the hashes docs/protocol.md defines on it: keys sorted, no whitespace, arrays kept in order.
// Every staged event is hashed, so this is on the streaming hot path: plain loops and string concatenation,
// no per-object entry arrays or closures.
import * as crypto from 'node:crypto';
import type { StreamFilter, TradeData, WireEvent } from './codec.js';

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
const oneShotHash = (crypto as { hash?: (algorithm: string, data: string, encoding: 'hex') => string }).hash;

export function sha256Hex(text: string): string {
  return oneShotHash
    ? oneShotHash('sha256', text, 'hex')
    : crypto.createHash('sha256').update(text, 'utf8').digest('hex');
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
  return CONTENT_IDENTITY_PREFIX + sha256Hex(contentIdentityJson(event));
}

/**
 * canonicalJson({kind, entityId, revision, data}) without sorting per event. For data of the trade shape (exactly
 * its seven keys, all strings) the canonical bytes are written straight out, keys in their sorted order (data:
 * asset, market, price, side, size, txHash, wallet; then entityId, kind, revision): rebuilding the objects for one
 * JSON.stringify cost three times as much. Any other data goes through the generic canonicalJson. A property test
 * holds both to canonicalJson.
 */
export function contentIdentityJson(event: EventContent): string {
  const { kind, entityId, revision, data } = event;
  if (isTradeShaped(data) && typeof kind === 'string' && typeof entityId === 'string' && Number.isFinite(revision)) {
    return tradeIdentityJson(kind, entityId, revision, data);
  }
  return (
    `{"data":${canonicalJson(event.data)},"entityId":${canonicalJson(entityId)},` +
    `"kind":${canonicalJson(kind)},"revision":${canonicalJson(revision)}}`
  );
}

/**
 * eventContentHash of an event whose data is known to be of the trade shape (exactly its seven keys, all strings:
 * the codec returned the parsed data itself as the trade), without checking the shape again.
 */
export function tradeContentHash(kind: string, entityId: string, revision: number, data: TradeData): string {
  return CONTENT_IDENTITY_PREFIX + sha256Hex(tradeIdentityJson(kind, entityId, revision, data));
}

function tradeIdentityJson(kind: string, entityId: string, revision: number, data: TradeShape): string {
  return (
    `{"data":{"asset":${jsonString(data.asset)},"market":${jsonString(data.market)},` +
    `"price":${jsonString(data.price)},"side":${jsonString(data.side)},"size":${jsonString(data.size)},` +
    `"txHash":${jsonString(data.txHash)},"wallet":${jsonString(data.wallet)}},` +
    `"entityId":${jsonString(entityId)},"kind":${jsonString(kind)},"revision":${JSON.stringify(revision)}}`
  );
}

/** Characters JSON.stringify escapes (quote, backslash, controls) or may (any surrogate: a lone one is escaped). */
// eslint-disable-next-line no-control-regex -- the control characters are exactly what JSON escapes
const ESCAPED_IN_JSON = /["\\\u0000-\u001f\ud800-\udfff]/;

/** JSON.stringify(text): quoted as is when nothing in it needs escaping, the common case. */
function jsonString(text: string): string {
  return ESCAPED_IN_JSON.test(text) ? JSON.stringify(text) : `"${text}"`;
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
