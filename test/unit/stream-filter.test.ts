// The subscription filter is checked in two places that must agree: the codec (the reference server decoding a
// subscribe frame, the pages endpoint) and the workflow (an operator's rebind request). Both run checkFilter.
import { describe, expect, it } from 'vitest';
import { checkFilter } from '../../protocol/codec-filter.js';
import { decodeClientFrame, WireError } from '../../protocol/codec.js';
import { parseRebindRequest } from '../../workflows/validation.js';

const subscribe = (filter: unknown) =>
  JSON.stringify({
    v: 1,
    type: 'subscribe',
    consumerId: 'c1',
    subscriptionId: 's1',
    filter,
    start: { mode: 'from_floor' },
  });

function wireError(text: string): WireError {
  try {
    decodeClientFrame(text);
  } catch (error) {
    if (error instanceof WireError) return error;
    throw error;
  }
  throw new Error('the frame was accepted');
}

describe('checkFilter', () => {
  it('returns a copy with the documented key order, so equal filters look alike', () => {
    const given = { minNotional: '2500.5', wallets: ['0xw'], kinds: ['trade'] };
    const checked = checkFilter(given);
    expect(checked).toEqual({ ok: true, filter: given });
    if (!checked.ok) return;
    expect(Object.keys(checked.filter)).toEqual(['kinds', 'wallets', 'minNotional']);
    expect(checked.filter.kinds).not.toBe(given.kinds);
    expect(checkFilter({})).toEqual({ ok: true, filter: {} });
  });

  it('names every problem with its path: unknown keys, non-lists, empty names, non-decimal notionals', () => {
    expect(
      checkFilter({ market: ['m'], wallet: 'w', kinds: 'trade', markets: ['m1', ''], minNotional: '1e6' }),
    ).toEqual({
      ok: false,
      problems: [
        { path: [], message: 'Unrecognized keys: "market", "wallet"' },
        { path: ['kinds'], message: 'must be a list of non-empty strings' },
        { path: ['markets', 1], message: 'must be a non-empty string' },
        { path: ['minNotional'], message: 'must be a non-negative decimal string such as "0.42"' },
      ],
    });
    for (const notAnObject of [null, [], 'trade', 3, undefined]) {
      expect(checkFilter(notAnObject)).toMatchObject({ ok: false, problems: [{ path: [] }] });
    }
    expect(checkFilter({ minNotional: 5 })).toMatchObject({ ok: false, problems: [{ path: ['minNotional'] }] });
  });
});

describe('the codec and the workflow agree on filters', () => {
  it('a subscribe frame carries the checked filter, in the documented key order', () => {
    const frame = decodeClientFrame(subscribe({ markets: ['m1'], kinds: ['trade'] }));
    expect(frame.type === 'subscribe' && Object.keys(frame.filter)).toEqual(['kinds', 'markets']);
  });

  it('a filter the one refuses, the other refuses at the same field', () => {
    const refused: [unknown, string][] = [
      [{ market: ['m1'] }, 'filter'],
      [{ minNotional: 'lots' }, 'filter.minNotional'],
      [{ wallets: [''] }, 'filter.wallets.0'],
      ['everything', 'filter'],
    ];
    for (const [filter, field] of refused) {
      expect(wireError(subscribe(filter)).field).toBe(field);
      expect(() => parseRebindRequest({ filter, requestedBy: 'ops' })).toThrow(`invalid rebind request: ${field}: `);
    }
  });
});

describe('operator input', () => {
  it('is trimmed, and loses keys it does not know', () => {
    expect(parseRebindRequest({ filter: { kinds: ['trade'] }, requestedBy: ' ops ', note: 'x' })).toEqual({
      filter: { kinds: ['trade'] },
      requestedBy: 'ops',
    });
  });

  it('names a blank replyTo and a request that is not an object', () => {
    expect(() => parseRebindRequest({ filter: {}, requestedBy: 'ops', replyTo: '' })).toThrow(
      'invalid rebind request: replyTo: replyTo, when given, is a non-empty string',
    );
    expect(() => parseRebindRequest('rebind')).toThrow(/^invalid rebind request: \(input\): must be an object; /);
  });
});
