// Canonical JSON and the hashes PROTOCOL.md defines on it: keys sorted, no whitespace, arrays kept in order.
import { createHash } from 'node:crypto';
import type { StreamFilter, WireEvent } from './codec.js';

export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value)) throw new TypeError('canonicalJson: non-finite number');
    if (value === undefined) throw new TypeError('canonicalJson: undefined has no JSON form');
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** `"sha256:" + hex SHA-256 of the filter's canonical JSON`. */
export function filterHash(filter: StreamFilter): string {
  return `sha256:${sha256Hex(canonicalJson(filter))}`;
}

/** Content identity of an event: same eventId + same hash is a duplicate, a different hash is a conflict. */
export function eventContentHash(event: Pick<WireEvent, 'kind' | 'entityId' | 'revision' | 'data' | 'ordinal'>, position: number): string {
  return sha256Hex(
    canonicalJson({ kind: event.kind, entityId: event.entityId, revision: event.revision, data: event.data, position, ordinal: event.ordinal }),
  );
}
