// One request to the paginated history source (docs/protocol.md §8): the page at a cursor, asked with the
// consumer's filter and the API key, and the answer read as a page, a reset (410) or a failure that says whether
// the same cursor may be asked again. Failure messages never carry the key.
import { canonicalJson } from '../protocol/canonical.js';
import {
  decodePageError,
  decodePageReset,
  decodePageResponse,
  pageAuthorization,
  pagePath,
  PAGE_QUERY,
  type PageError,
  type PageReset,
  type PageResponse,
  type StreamFilter,
} from '../protocol/codec.js';
import { redactSecret } from '../protocol/redact.js';

export interface PageSourceConfig {
  /** HTTP base of the source, e.g. http://127.0.0.1:8787 */
  url: string;
  /** Sent as the page endpoint's `Authorization`; never logged, never in an outcome. */
  apiKey: string;
  stream: string;
  /** Events per page asked of the source (it may return more: pages hold whole transitions). */
  limit: number;
  /** Per request; default 30 s. */
  requestTimeoutMs?: number;
}

export interface PageQuery {
  /** Fixed per consumer: the source binds cursors to it. */
  filter: StreamFilter;
  signal: AbortSignal;
  /** Default: the global fetch. */
  fetch?: typeof fetch;
}

export type PageFailureCode = PageError['code'] | 'invalid_page' | 'unavailable';

export type PageAnswer =
  | { kind: 'page'; page: PageResponse }
  | { kind: 'reset'; reset: PageReset }
  | {
      kind: 'failed';
      code: PageFailureCode;
      retryable: boolean;
      status: number | null;
      message: string;
      retryAfterMs?: number;
    }
  /** `signal` aborted the request. */
  | { kind: 'cancelled' };

const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
const RETRYABLE_CODES: ReadonlySet<string> = new Set(['overloaded', 'slow_consumer']);

/** Asks the source for the page at `cursor` (the retention floor when null). */
export async function requestPage(
  source: PageSourceConfig,
  cursor: string | null,
  query: PageQuery,
): Promise<PageAnswer> {
  const { signal } = query;
  const redact = (text: string) => redactSecret(text, source.apiKey);
  const url = pageUrl(source, cursor, query.filter);
  let res: Response;
  let text: string;
  try {
    res = await (query.fetch ?? fetch)(url, {
      headers: { authorization: pageAuthorization(source.apiKey), accept: 'application/json' },
      signal: AbortSignal.any([signal, AbortSignal.timeout(source.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS)]),
    });
    text = await res.text();
  } catch (error) {
    // Connection refused or reset, a timeout, a body cut short: the same cursor may simply be asked again.
    if (signal.aborted) return { kind: 'cancelled' };
    return { kind: 'failed', code: 'unavailable', retryable: true, status: null, message: redact(messageOf(error)) };
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined; // decoding below names what is wrong
  }
  try {
    if (res.status === 200) return { kind: 'page', page: decodePageResponse(body) };
    if (res.status === 410) return { kind: 'reset', reset: decodePageReset(body) };
  } catch (error) {
    return {
      kind: 'failed',
      code: 'invalid_page',
      retryable: false,
      status: res.status,
      message: redact(messageOf(error)),
    };
  }
  return failedAnswer(res, body, redact);
}

function pageUrl(source: PageSourceConfig, cursor: string | null, filter: StreamFilter): URL {
  const url = new URL(pagePath(source.stream), source.url);
  if (cursor !== null) url.searchParams.set(PAGE_QUERY.cursor, cursor);
  url.searchParams.set(PAGE_QUERY.limit, String(source.limit));
  url.searchParams.set(PAGE_QUERY.filter, canonicalJson(filter));
  return url;
}

/** An error status: the source's error body when it sent one, its Retry-After hint, and whether to ask again. */
function failedAnswer(res: Response, body: unknown, redact: (text: string) => string): PageAnswer {
  const retryAfter = Number(res.headers.get('retry-after'));
  const retryAfterMs = Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : undefined;
  let error: PageError | undefined;
  try {
    error = decodePageError(body);
  } catch {
    error = undefined;
  }
  const retryable = error ? RETRYABLE_CODES.has(error.code) : res.status >= 500 || res.status === 429;
  return {
    kind: 'failed',
    code: error?.code ?? 'unavailable',
    retryable,
    status: res.status,
    message: redact(error?.message ?? `HTTP ${res.status}`),
    ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
  };
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
