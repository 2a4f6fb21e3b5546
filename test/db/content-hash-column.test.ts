// Content hashes are stored as bytes (db/content-hash-column.ts, migration 0009): every hash the code makes, current
// (`v2:` + hex) or legacy (bare hex), must come back from Postgres as exactly the text it was, and Postgres must
// hold the digest's own bytes, as migration 0009 converts the rows saved as text (test/db/migration-0009.test.ts).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ContentHashFormatError, contentHashArray, contentHashOf } from '../../db/content-hash-column.js';
import { CONTENT_IDENTITY_PREFIX } from '../../protocol/canonical.js';
import { useTestDatabase } from '../support/db.js';

const db = useTestDatabase();

const digestHex = fc.uint8Array({ minLength: 32, maxLength: 32 }).map((bytes) => Buffer.from(bytes).toString('hex'));
const contentHash = fc.oneof(
  digestHex.map((hex) => CONTENT_IDENTITY_PREFIX + hex),
  digestHex, // legacy
);

describe('content hashes stored as bytes', () => {
  it('read back as the text written, and stored as the digest bytes (after 0x02 for a current hash)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(contentHash, { maxLength: 20 }), async (hashes) => {
        const { rows } = await db.pool.query<{ stored: Buffer }>(
          'SELECT stored FROM unnest($1::bytea[]) WITH ORDINALITY AS h(stored, n) ORDER BY n',
          [contentHashArray(hashes)],
        );
        expect(rows.map((r) => contentHashOf(r.stored))).toEqual(hashes);
        expect(rows.map((r) => r.stored.toString('hex'))).toEqual(
          hashes.map((h) => (h.startsWith(CONTENT_IDENTITY_PREFIX) ? `02${h.slice(3)}` : h)),
        );
      }),
      { numRuns: 200 },
    );
  });

  it('writes an array of current hashes alone (decoded in one piece) exactly as one hash at a time', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(digestHex, { minLength: 1, maxLength: 40 }), async (digests) => {
        const hashes = digests.map((hex) => CONTENT_IDENTITY_PREFIX + hex);
        const { rows } = await db.pool.query<{ stored: Buffer }>(
          'SELECT stored FROM unnest($1::bytea[]) WITH ORDINALITY AS h(stored, n) ORDER BY n',
          [contentHashArray(hashes)],
        );
        expect(rows.map((r) => r.stored.toString('hex'))).toEqual(digests.map((hex) => `02${hex}`));
      }),
      { numRuns: 100 },
    );
  });

  it('refuses what is not a content hash, naming it, before anything is sent', () => {
    const hex = 'ab'.repeat(32);
    for (const bad of ['', 'v2:', `v2:${hex}0`, `v3:${hex}`, `v2:${hex.slice(2)}zz`, `sha256:${hex}`]) {
      expect(() => contentHashArray([`v2:${hex}`, bad])).toThrow(ContentHashFormatError);
      expect(() => contentHashArray([bad, `v2:${hex}`])).toThrow(ContentHashFormatError);
    }
    expect(() => contentHashArray(['nope'])).toThrow(
      'not a content hash (v2:<64 hex digits> or 64 hex digits): "nope"',
    );
    expect(() => contentHashOf(Buffer.alloc(31))).toThrow(ContentHashFormatError);
    expect(() => contentHashOf(Buffer.concat([Buffer.from([3]), Buffer.alloc(32)]))).toThrow(ContentHashFormatError);
  });
});
