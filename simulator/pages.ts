// The paginated history endpoint (docs/protocol.md §8): GET /v1/streams/{stream}/events?cursor&limit&filter
// answers `{events, next, history}`. A page holds whole transitions; cursors are tokens bound to the history
// and the filter; at the head `next` equals the request cursor (non-advancing: the reader backs off).
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  PAGE_QUERY,
  apiKeyOfPageAuthorization,
  filterSchema,
  type PageError,
  type PageEvent,
  type PageReset,
  type PageResponse,
  type StreamFilter,
} from '../protocol/codec.js';
import { filterHash as computeFilterHash } from '../protocol/canonical.js';
import { takePageExpired, takePageNonAdvancing, takePageOverlap, type FaultPlan } from './faults.js';
import { compileFilter, type EventMatcher } from './filter.js';
import type { Journal } from './journal.js';
import type { Transition } from './journal-types.js';
import type { TokenSigner } from './tokens.js';

/** Transitions one page scans at most, so that a sparse filter answers a zero-item page with a new cursor. */
const PAGE_SCAN_LIMIT = 5000;

export interface PageSource {
  readonly journal: Journal;
  readonly signer: TokenSigner;
  readonly faults: FaultPlan;
  checkApiKey(key: string): string | undefined;
}

/** Answers one page request (the caller has matched the path). */
export function servePage(source: PageSource, req: IncomingMessage, url: URL, res: ServerResponse): void {
  const { journal, signer, faults } = source;
  if (!source.checkApiKey(apiKeyOfPageAuthorization(req.headers.authorization))) {
    sendJson(res, 401, { code: 'unauthorized', message: 'missing or unknown API key' } satisfies PageError);
    return;
  }
  const limitText = url.searchParams.get(PAGE_QUERY.limit) ?? '100';
  const limit = Number(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) {
    sendJson(res, 400, {
      code: 'protocol_violation',
      message: 'limit must be an integer within 1..10000',
    } satisfies PageError);
    return;
  }
  let filter: StreamFilter = {};
  const filterText = url.searchParams.get(PAGE_QUERY.filter);
  if (filterText !== null) {
    let json: unknown;
    try {
      json = JSON.parse(filterText);
    } catch {
      json = undefined;
    }
    const parsed = filterSchema.safeParse(json);
    if (!parsed.success) {
      sendJson(res, 400, {
        code: 'protocol_violation',
        message: 'filter must be a filter object as canonical JSON',
      } satisfies PageError);
      return;
    }
    filter = parsed.data;
  }
  const hash = computeFilterHash(filter);
  const history = journal.history;
  const cursor = url.searchParams.get(PAGE_QUERY.cursor);
  let after = history.floor - 1;
  if (cursor !== null) {
    const claims = signer.verify(cursor);
    if (!claims || claims.consumerId !== '' || claims.subscriptionId !== '') {
      sendJson(res, 409, {
        code: 'cursor_mismatch',
        message: 'the cursor is not a page cursor of this server',
      } satisfies PageError);
      return;
    }
    if (claims.historyId !== history.id) {
      sendJson(res, 410, { reason: 'history_rebuilt', token: cursor, history } satisfies PageReset);
      return;
    }
    if (claims.filterHash !== hash || claims.position > history.head) {
      sendJson(res, 409, {
        code: 'cursor_mismatch',
        message: 'the cursor belongs to another filter',
      } satisfies PageError);
      return;
    }
    if (claims.position < history.floor - 1) {
      sendJson(res, 410, { reason: 'cursor_expired', token: cursor, history } satisfies PageReset);
      return;
    }
    after = claims.position;
  }
  if (takePageExpired(faults)) {
    sendJson(res, 410, { reason: 'cursor_expired', token: cursor ?? '', history } satisfies PageReset);
    return;
  }
  const matcher = compileFilter(filter);
  const events: PageEvent[] = overlapEvents(journal, faults, after, matcher);
  let end = after;
  let scanned = 0;
  const scanLimit = faults.pageScanLimit ?? PAGE_SCAN_LIMIT;
  for (const t of journal.range(after, history.head)) {
    if (events.length >= limit || scanned >= scanLimit) break;
    events.push(...pageEvents(t, matcher));
    end = t.position;
    scanned += 1;
  }
  const next =
    cursor !== null && takePageNonAdvancing(faults)
      ? cursor
      : signer.sign({
          historyId: history.id,
          consumerId: '',
          subscriptionId: '',
          generation: 0,
          filterHash: hash,
          position: end,
        });
  sendJson(res, 200, { events, next, history } satisfies PageResponse);
}

/**
 * A retried page that starts before its cursor, when the overlap fault is armed: the reader must recognise
 * these events as already applied.
 */
function overlapEvents(journal: Journal, faults: FaultPlan, after: number, matcher: EventMatcher): PageEvent[] {
  const overlap = takePageOverlap(faults);
  if (!overlap) return [];
  let remaining = overlap.transitions;
  const earlier: PageEvent[][] = [];
  for (let i = journal.indexAfter(after) - 1; i >= 0 && remaining > 0; i--) {
    const transition = journal.at(i) as Transition;
    if (overlap.omitCursorPosition && transition.position === after) continue;
    const events = pageEvents(transition, matcher);
    if (events.length === 0) continue;
    earlier.unshift(events);
    remaining -= 1;
  }
  return earlier.flat();
}

function pageEvents(transition: Transition, matcher: EventMatcher): PageEvent[] {
  return transition.events.filter(matcher).map((e) => ({ position: transition.position, ...e }));
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
