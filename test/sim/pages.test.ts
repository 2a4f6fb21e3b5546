// The paginated history endpoint (docs/protocol.md §8) of the reference server.
import { describe, expect, it } from 'vitest';
import {
  PAGE_QUERY,
  decodePageError,
  decodePageReset,
  decodePageResponse,
  pagePath,
  type PageEvent,
  type PageResponse,
  type StreamFilter,
} from '../../protocol/codec.js';
import { canonicalJson } from '../../protocol/canonical.js';
import { API_KEY, useHarness } from './harness.js';

const h = useHarness();

async function getPage(opts: {
  cursor?: string;
  limit?: number;
  filter?: StreamFilter;
  apiKey?: string;
}): Promise<{ status: number; body: unknown }> {
  const url = new URL(pagePath(h.server.stream), h.server.httpUrl);
  if (opts.cursor !== undefined) url.searchParams.set(PAGE_QUERY.cursor, opts.cursor);
  if (opts.limit !== undefined) url.searchParams.set(PAGE_QUERY.limit, String(opts.limit));
  if (opts.filter !== undefined) url.searchParams.set(PAGE_QUERY.filter, canonicalJson(opts.filter));
  const res = await fetch(url, { headers: { authorization: `Bearer ${opts.apiKey ?? API_KEY}` } });
  return { status: res.status, body: await res.json() };
}

async function page(opts: Parameters<typeof getPage>[0]): Promise<PageResponse> {
  const { status, body } = await getPage(opts);
  expect(status).toBe(200);
  return decodePageResponse(body);
}

function journalEvents(pred: (e: PageEvent) => boolean = () => true): PageEvent[] {
  return [...h.server.journal.range(0, h.server.journal.head)]
    .flatMap((t) => t.events.map((e) => ({ position: t.position, ...e })))
    .filter(pred);
}

describe('pages', () => {
  it('walks the whole journal in order from the floor, then answers a non-advancing page at the head', async () => {
    await h.start();
    const events: PageEvent[] = [];
    let cursor: string | undefined;
    for (;;) {
      const p = await page({ cursor, limit: 7 });
      expect(p.history).toEqual(h.server.journal.history);
      events.push(...p.events);
      if (p.next === cursor) break;
      cursor = p.next;
    }
    expect(events).toEqual(journalEvents());
  });

  it('filters pages and binds the cursor to the filter', async () => {
    await h.start();
    const filter = { kinds: ['correction'] };
    const first = await page({ filter, limit: 1000 });
    expect(first.events).toEqual(journalEvents((e) => e.kind === 'correction'));
    const other = await getPage({ cursor: first.next, filter: { kinds: ['trade'] } });
    expect(other.status).toBe(409);
    expect(decodePageError(other.body).code).toBe('cursor_mismatch');
  });

  it('refuses a request without a valid API key', async () => {
    await h.start();
    const res = await getPage({ apiKey: 'nope' });
    expect(res.status).toBe(401);
    expect(decodePageError(res.body).code).toBe('unauthorized');
  });

  it('overlapping page fault: re-includes events from before the cursor', async () => {
    const server = await h.start();
    const first = await page({ limit: 10 });
    const lastPosition = first.events.at(-1)!.position;
    server.faults.pageOverlap = 2;
    const second = await page({ cursor: first.next, limit: 10 });
    const before = second.events.filter((e) => e.position <= lastPosition);
    expect(before.length).toBeGreaterThan(0);
    expect(first.events).toEqual(expect.arrayContaining(before));
    expect(second.events.some((e) => e.position > lastPosition)).toBe(true);
  });

  it('non-advancing page fault: next equals the request cursor', async () => {
    const server = await h.start();
    const first = await page({ limit: 5 });
    server.faults.pageNonAdvancing = true;
    const second = await page({ cursor: first.next, limit: 5 });
    expect(second.next).toBe(first.next);
    expect((await page({ cursor: first.next, limit: 5 })).next).not.toBe(first.next);
  });

  it('answers 410 with a reset body for a cursor below the floor, or when the expiry fault is armed', async () => {
    const server = await h.start();
    const first = await page({ limit: 3 });
    server.journal.setRetentionFloor(30);
    const expired = await getPage({ cursor: first.next });
    expect(expired.status).toBe(410);
    expect(decodePageReset(expired.body)).toEqual({
      reason: 'cursor_expired',
      token: first.next,
      history: server.journal.history,
    });

    const fresh = await page({ limit: 3 });
    expect(fresh.events[0]!.position).toBe(30);
    server.faults.pageExpired = true;
    expect((await getPage({ cursor: fresh.next })).status).toBe(410);
    expect((await getPage({ cursor: fresh.next })).status).toBe(200);
  });

  it('answers 410 history_rebuilt for a cursor of an older history', async () => {
    const server = await h.start();
    const first = await page({ limit: 3 });
    server.journal.rebuildHistory();
    const res = await getPage({ cursor: first.next });
    expect(res.status).toBe(410);
    expect(decodePageReset(res.body).reason).toBe('history_rebuilt');
  });

  it('overlap omitting the cursor position: saved cursor C7 at 105, the page holds 104, 106, 107 and next C8', async () => {
    // One event per transition, so that positions read as in the oracle of docs/protocol.md §7.
    const server = await h.start({ generate: { transitions: 110, maxEventsPerTransition: 1 } });
    const c7 = (await page({ limit: 105 })).next;
    const c8 = (await page({ cursor: c7, limit: 2 })).next;
    server.faults.pageOverlap = { transitions: 1, omitCursorPosition: true };
    const overlapping = await page({ cursor: c7, limit: 3 });
    expect(overlapping.events.map((e) => e.position)).toEqual([104, 106, 107]);
    expect(overlapping.events).toEqual(journalEvents((e) => [104, 106, 107].includes(e.position)));
    expect(overlapping.next).toBe(c8);
    expect(server.faults.pageOverlap).toBeUndefined();
    expect((await page({ cursor: c8, limit: 1 })).events.map((e) => e.position)).toEqual([108]);
  });

  it('answers zero-item pages whose cursor advances when a page scans only transitions the filter misses', async () => {
    const server = await h.start({ generate: { transitions: 6 }, faults: { pageScanLimit: 3 } });
    const base = { kind: 'trade', entityId: 'trade-m-x', revision: 1, observedAt: '2026-01-01T00:00:00.000Z' };
    server.journal.append({ events: [{ ...base, data: { market: 'm-x', wallet: '0xabc' } }] });
    const filter = { markets: ['m-x'] };
    const first = await page({ filter, limit: 10 });
    const second = await page({ filter, limit: 10, cursor: first.next });
    expect([first.events, second.events]).toEqual([[], []]);
    expect(second.next).not.toBe(first.next);
    const third = await page({ filter, limit: 10, cursor: second.next });
    expect(third.events.map((e) => e.position)).toEqual([7]);
    expect((await page({ filter, limit: 10, cursor: third.next })).next).toBe(third.next);

    server.faults.pageScanLimit = undefined;
    expect((await page({ filter, limit: 10 })).events.map((e) => e.position)).toEqual([7]);
  });

  it('non-advancing on every page until the fault is removed', async () => {
    const server = await h.start();
    const first = await page({ limit: 5 });
    server.faults.pageNonAdvancing = 'every_page';
    for (let i = 0; i < 3; i++) expect((await page({ cursor: first.next, limit: 5 })).next).toBe(first.next);
    server.faults.pageNonAdvancing = undefined;
    expect((await page({ cursor: first.next, limit: 5 })).next).not.toBe(first.next);
  });
});
