// Opaque resume tokens: base64url(JSON payload) "." base64url(HMAC-SHA256(payload)). Only the server
// reads them; clients store them whole. The payload binds everything a resume must match.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';

const payloadSchema = z.object({
  h: z.string(), // history id
  c: z.string(), // consumer id ('' for page cursors)
  s: z.string(), // subscription id ('' for page cursors)
  g: z.number().int().nonnegative(), // generation (0 for page cursors)
  f: z.string(), // filter hash
  p: z.number().int().nonnegative(), // position
});

export interface TokenClaims {
  historyId: string;
  consumerId: string;
  subscriptionId: string;
  generation: number;
  filterHash: string;
  position: number;
}

export class TokenSigner {
  constructor(private readonly secret: string) {
    if (secret.length === 0) throw new Error('TokenSigner: the token secret must not be empty');
  }

  sign(claims: TokenClaims): string {
    const payload = Buffer.from(
      JSON.stringify({
        h: claims.historyId,
        c: claims.consumerId,
        s: claims.subscriptionId,
        g: claims.generation,
        f: claims.filterHash,
        p: claims.position,
      }),
      'utf8',
    ).toString('base64url');
    return `${payload}.${this.mac(payload)}`;
  }

  /** The claims of a token this signer issued, or undefined for a forged, altered or malformed one. */
  verify(token: string): TokenClaims | undefined {
    const dot = token.indexOf('.');
    if (dot <= 0) return undefined;
    const payload = token.slice(0, dot);
    const given = Buffer.from(token.slice(dot + 1), 'base64url');
    const expected = Buffer.from(this.mac(payload), 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
    let json: unknown;
    try {
      json = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
    } catch {
      return undefined;
    }
    const parsed = payloadSchema.safeParse(json);
    if (!parsed.success) return undefined;
    const p = parsed.data;
    return { historyId: p.h, consumerId: p.c, subscriptionId: p.s, generation: p.g, filterHash: p.f, position: p.p };
  }

  private mac(payload: string): string {
    return createHmac('sha256', this.secret).update(payload, 'utf8').digest('base64url');
  }
}
