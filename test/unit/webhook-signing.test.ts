// Signatures as the Standard Webhooks specification defines them, checked against its own library: what a
// receiver verifies with `standardwebhooks` (docs/examples/alert-receiver.ts) is what the dispatcher signs, with
// one secret or with two during a rotation.
import { describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { webhookSigner } from '../../activities/webhook.js';

const secret = (fill: number) => `whsec_${Buffer.alloc(32, fill).toString('base64')}`;
const [CURRENT, PREVIOUS, OTHER] = [secret(1), secret(2), secret(3)];

function headersFor(secrets: string[], body: string, at = new Date()) {
  return {
    'webhook-id': 'whale_alert:ev-1',
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': webhookSigner(secrets)('whale_alert:ev-1', at, body),
  };
}

describe('webhook signatures', () => {
  const body = JSON.stringify({ idempotencyKey: 'whale_alert:ev-1', payload: { notional: '50000' } });

  it('are exactly what the specification library computes, and verify with it', () => {
    const at = new Date();
    expect(webhookSigner([CURRENT])('whale_alert:ev-1', at, body)).toBe(
      new Webhook(CURRENT).sign('whale_alert:ev-1', at, body),
    );
    expect(new Webhook(CURRENT).verify(body, headersFor([CURRENT], body))).toEqual(JSON.parse(body));
  });

  it('carry one signature per secret during a rotation: a receiver with either one verifies, another does not', () => {
    const headers = headersFor([CURRENT, PREVIOUS], body);
    expect(headers['webhook-signature'].split(' ')).toHaveLength(2);
    expect(new Webhook(PREVIOUS).verify(body, headers)).toEqual(JSON.parse(body));
    expect(new Webhook(CURRENT).verify(body, headers)).toEqual(JSON.parse(body));
    expect(() => new Webhook(OTHER).verify(body, headers)).toThrow(/No matching signature/);
  });

  it('do not verify for a changed body or a timestamp more than five minutes off', () => {
    const headers = headersFor([CURRENT], body);
    expect(() => new Webhook(CURRENT).verify(body.replace('50000', '90000'), headers)).toThrow();
    const stale = headersFor([CURRENT], body, new Date(Date.now() - 6 * 60_000));
    expect(() => new Webhook(CURRENT).verify(body, stale)).toThrow(/too old/);
  });
});
