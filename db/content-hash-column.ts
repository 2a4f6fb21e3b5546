// How a content hash is stored: as its digest's bytes (bytea), not as its text. Receipts and quarantine records
// each keep one, and every streamed event writes a receipt: as text (`v2:` and 64 hex digits, 71 bytes in the
// commit's array parameter) it was the widest column the commit sends, and Postgres spent about two fifths more per
// receipt row receiving and storing it than it spends on the 33 bytes (migration 0009; docs/design.md, The commit).
// The code above db/ keeps the text form (protocol/canonical.ts); only this module knows the stored one.
//   current hash `v2:<hex>`  <->  0x02 followed by the 32 digest bytes
//   legacy hash  `<hex>`     <->  the 32 digest bytes alone
import { CONTENT_IDENTITY_PREFIX } from '../protocol/canonical.js';
import { binaryByteaArray, hexWrite, joinedHexByteaArray } from './pg-arrays.js';

const DIGEST_BYTES = 32;
const DIGEST_HEX = 2 * DIGEST_BYTES;
/** The stored form's first byte for a current hash; a legacy one has none (its digest is all its bytes). */
const CURRENT_TAG = 0x02;
const CURRENT_TAG_HEX = CURRENT_TAG.toString(16).padStart(2, '0');
const PREFIX = CONTENT_IDENTITY_PREFIX.length;

/** A value that is not a content hash reached the database layer: a defect, never a stream's input. */
export class ContentHashFormatError extends TypeError {
  override readonly name = 'ContentHashFormatError';
  readonly code = 'content_hash_format' as const;
}

/** `v2:` and as many characters as a digest's hex (whether they are hex is the decoder's to find). */
function isCurrentForm(hash: string): boolean {
  return hash.length === PREFIX + DIGEST_HEX && hash.startsWith(CONTENT_IDENTITY_PREFIX);
}

/** The stored length of `hash`; throws ContentHashFormatError for a string of neither form's length and prefix. */
function storedLength(hash: string): number {
  if (isCurrentForm(hash)) return 1 + DIGEST_BYTES;
  if (hash.length === DIGEST_HEX) return DIGEST_BYTES;
  throw new ContentHashFormatError(`not a content hash (v2:<64 hex digits> or 64 hex digits): "${hash}"`);
}

/** `hash` (of a length storedLength accepted) in its stored form at `offset`; the bytes written. */
function writeStored(buffer: Buffer, offset: number, hash: string): number {
  const current = hash.length !== DIGEST_HEX;
  if (current) buffer[offset] = CURRENT_TAG;
  const digest = current ? hash.slice(PREFIX) : hash;
  if (hexWrite(buffer, digest, offset + (current ? 1 : 0), DIGEST_BYTES) !== DIGEST_BYTES)
    throw new ContentHashFormatError(`not a content hash (its digest is not 64 hex digits): "${hash}"`);
  return current ? 1 + DIGEST_BYTES : DIGEST_BYTES;
}

/** The hashes as a `bytea[]` parameter in their stored form. */
export function contentHashArray(hashes: readonly string[]): Buffer {
  return (
    joinedHexByteaArray(hashes.length, 1 + DIGEST_BYTES, CURRENT_TAG_HEX, (i) => currentDigest(hashes[i]!)) ??
    // A legacy hash in the array, or something that is no hash (named here)
    binaryByteaArray(
      hashes.length,
      (i) => storedLength(hashes[i]!),
      (buffer, offset, i) => writeStored(buffer, offset, hashes[i]!),
    )
  );
}

/** The digest's hex of a current hash; null for any other string (joinedHexByteaArray checks that it is hex). */
function currentDigest(hash: string): string | null {
  return isCurrentForm(hash) ? hash.slice(PREFIX) : null;
}

/** A stored content hash read back (pg returns bytea as a Buffer) in the text form the code compares. */
export function contentHashOf(stored: Buffer): string {
  if (stored.length === 1 + DIGEST_BYTES && stored[0] === CURRENT_TAG)
    return CONTENT_IDENTITY_PREFIX + stored.toString('hex', 1);
  if (stored.length === DIGEST_BYTES) return stored.toString('hex');
  throw new ContentHashFormatError(`a stored content hash of ${stored.length} bytes is of neither form`);
}
