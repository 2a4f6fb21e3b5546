// Canonical JSON and the hashes PROTOCOL.md defines on it: keys sorted, no whitespace, arrays kept in order.
// Every staged event is hashed, so this is on the streaming hot path: plain loops and string concatenation,
// no per-object entry arrays or closures.
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

/** Content identity of an event: same eventId + same hash is a duplicate, a different hash is a conflict. */
export function eventContentHash(
  event: Pick<WireEvent, 'kind' | 'entityId' | 'revision' | 'data' | 'ordinal'>,
  position: number,
): string {
  return sha256Hex(eventContentJson(event, position));
}

/**
 * canonicalJson({kind, entityId, revision, data, position, ordinal}) written out with its keys already in
 * sorted order (data, entityId, kind, ordinal, position, revision): the same bytes without sorting per event.
 */
function eventContentJson(
  event: Pick<WireEvent, 'kind' | 'entityId' | 'revision' | 'data' | 'ordinal'>,
  position: number,
): string {
  const fields: [string, unknown][] = [
    ['data', event.data],
    ['entityId', event.entityId],
    ['kind', event.kind],
    ['ordinal', event.ordinal],
    ['position', position],
    ['revision', event.revision],
  ];
  let out = '{';
  for (const [key, item] of fields) {
    if (item === undefined) continue;
    out += `${out.length > 1 ? ',' : ''}"${key}":${canonicalJson(item)}`;
  }
  return `${out}}`;
}
