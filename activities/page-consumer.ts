// The Temporal-agnostic core of a paginated history consumer (PROTOCOL.md section 8):
//   fetch the page at the saved cursor → recognise the events inside the durable prefix by their receipts →
//   give the rest durable outcomes in chunks (each one transaction: effects, receipts, applied_position) →
//   only then replace the cursor with the page's `next`, by one compare-and-swap.
// A crash anywhere resumes from the saved cursor; an overlapping or repeated page is recognised, never
// reapplied. A non-advancing page is never applied: the reader backs off a bounded number of times and stops.
import { setTimeout as delay } from 'node:timers/promises';
import type pg from 'pg';
import {
  commitPageChunk,
  openPageProgress,
  recognisePageEvents,
  swapPageCursor,
  type PageProgress,
} from '../db/pages.js';
import type { HeldQuarantineItem } from '../domain/outcomes.js';
import { canonicalJson } from '../protocol/canonical.js';
import {
  decodePageError,
  decodePageReset,
  decodePageResponse,
  pageAuthorization,
  pagePath,
  PAGE_QUERY,
  type History,
  type PageError,
  type PageReset,
  type PageResponse,
  type ResetReason,
  type StreamFilter,
  WireError,
} from '../protocol/codec.js';
import { backoffDelay, type Backoff } from '../protocol/backoff.js';
import {
  chunkByPosition,
  classifyPage,
  journalOrderProblem,
  splitAtApplied,
  stagePageEvents,
} from '../protocol/pages.js';
import type { ActionRules, QuarantinePolicy, StagedEvent } from '../protocol/types.js';
import type { ConsumeStreamLog } from './consume-stream.js';

export interface PageConsumerConfig {
  /** HTTP base of the source, e.g. http://127.0.0.1:8787 */
  url: string;
  /** Sent as the page endpoint's `Authorization`; never logged, never in an outcome. */
  apiKey: string;
  stream: string;
  /** Events per page asked of the source (it may return more: pages hold whole transitions). */
  limit: number;
  /** Events per durable chunk (a position is never split, so a chunk can be larger). */
  chunkSize: number;
  /** Bounds the repeats of a non-advancing page and of retryable failures. */
  backoff: Backoff;
  /** Per request; default 30 s. */
  requestTimeoutMs?: number;
  /** Default: every quarantine reason is held. */
  quarantinePolicy?: QuarantinePolicy;
  /** Default: no whale alerts. */
  actions?: ActionRules;
}

export interface PageConsumerHooks {
  /** After a chunk's transaction committed (test cut point: throw to simulate a crash). */
  afterChunkCommit?(progress: { appliedPosition: number; version: number }): void | Promise<void>;
  /** After a page's `next` replaced the cursor. */
  afterCursorSwap?(progress: { appliedPosition: number; version: number }): void | Promise<void>;
}

export interface PageConsumerDeps {
  pool: pg.Pool;
  config: PageConsumerConfig;
  /** Default: the global fetch. */
  fetch?: typeof fetch;
  log: ConsumeStreamLog;
  hooks?: PageConsumerHooks;
}

export interface ConsumePagesInput {
  consumerId: string;
  /** Fixed per consumer: the source binds cursors to it. */
  filter: StreamFilter;
  /**
   * Stop with `page_limit` after this many pages whose cursor was replaced; default: until the source stops advancing.
   */
  maxPages?: number;
}

export interface PageCounters {
  requests: number;
  pages: number;
  chunks: number;
  applied: number;
  /** Events of the page at or below the applied position, matched to their receipts. */
  recognised: number;
  duplicates: number;
  noEffect: number;
  quarantined: number;
}

/** Small: never a page, never the key. */
export interface PageHeartbeat {
  appliedPosition: number;
  version: number;
  counters: PageCounters;
}

export interface ConsumePagesContext {
  heartbeat(details: PageHeartbeat): void;
  signal: AbortSignal;
}

/** The saved progress when the run stopped (the database stays the authority). */
export interface PageProgressView {
  resumeCursor: string | null;
  appliedPosition: number;
  version: number;
}

export type PageStop =
  | { kind: 'page_limit' }
  /** The source repeated the request cursor with no event above the applied position through every backoff attempt. */
  | { kind: 'caught_up'; attempts: number }
  /** The source repeated the request cursor with events through every backoff attempt; nothing of them was applied. */
  | { kind: 'non_advancing'; attempts: number }
  /** 410 (or a page of another history): the cursor is kept until an explicit decision. */
  | { kind: 'reset'; reason: ResetReason; history: History; refusedToken: string }
  | { kind: 'conflict'; eventId: string; savedHash: string; incomingHash: string }
  /** An event at or below the applied position without a receipt: the source's past changed. Nothing applied. */
  | { kind: 'unrecognised_event'; eventId: string; position: number }
  | { kind: 'held_quarantine'; items: HeldQuarantineItem[] }
  /** Another run moved this consumer's progress; this one stopped without writing. */
  | { kind: 'fenced'; actualVersion: number | null }
  /** The consumer id is bound to another stream or filter, or is a stream consumer. */
  | { kind: 'binding_mismatch'; message: string }
  | {
      kind: 'source_failed';
      code: PageError['code'] | 'invalid_page' | 'unavailable';
      /** true when the failure was retryable and the backoff bound ran out. */
      retryable: boolean;
      status: number | null;
      message: string;
    }
  | { kind: 'cancelled' };

export type PageOutcome = PageStop & { progress: PageProgressView; counters: PageCounters };

type Answer =
  | { kind: 'page'; page: PageResponse }
  | { kind: 'reset'; reset: PageReset }
  | {
      kind: 'failed';
      code: Extract<PageStop, { kind: 'source_failed' }>['code'];
      retryable: boolean;
      status: number | null;
      message: string;
      retryAfterMs?: number;
    };

const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
const RETRYABLE_CODES: ReadonlySet<string> = new Set(['overloaded', 'slow_consumer']);

class Cancelled extends Error {
  override readonly name = 'Cancelled';
}

/** The configuration cannot work (thrown before any I/O). */
export class InvalidPageConsumerConfig extends Error {
  override readonly name = 'InvalidPageConsumerConfig';
  readonly code = 'invalid_page_consumer_config' as const;
  constructor(
    readonly field: string,
    reason: string,
  ) {
    super(`page consumer config ${field}: ${reason}`);
  }
}

function checkConfig(config: PageConsumerConfig): void {
  const positiveInt = (field: string, value: number) => {
    if (!Number.isSafeInteger(value) || value < 1)
      throw new InvalidPageConsumerConfig(field, `${value} is not a positive integer`);
  };
  positiveInt('limit', config.limit);
  positiveInt('chunkSize', config.chunkSize);
  const { maxAttempts, initialMs, maxMs } = config.backoff;
  if (!Number.isSafeInteger(maxAttempts) || maxAttempts < 0)
    throw new InvalidPageConsumerConfig('backoff.maxAttempts', `${maxAttempts} is not a non-negative integer`);
  if (!(initialMs >= 0 && maxMs >= initialMs && Number.isFinite(maxMs))) {
    throw new InvalidPageConsumerConfig(
      'backoff',
      `initialMs ${initialMs} and maxMs ${maxMs} must satisfy 0 <= initialMs <= maxMs < Infinity`,
    );
  }
  try {
    new URL(config.url);
  } catch {
    throw new InvalidPageConsumerConfig('url', 'is not an absolute URL');
  }
}

/**
 * Consumes pages from the consumer's saved cursor until the source stops advancing, `maxPages`, a stop the
 * operator must look at, or cancellation. Protocol stops are returned; InvalidPageConsumerConfig, storage
 * failures and errors thrown by hooks propagate (a retry resumes from the saved cursor).
 */
export async function consumePages(
  deps: PageConsumerDeps,
  input: ConsumePagesInput,
  ctx: ConsumePagesContext,
): Promise<PageOutcome> {
  const { pool, config, log } = deps;
  checkConfig(config);
  const fetchPage = deps.fetch ?? fetch;
  const { consumerId, filter } = input;
  const counters: PageCounters = {
    requests: 0,
    pages: 0,
    chunks: 0,
    applied: 0,
    recognised: 0,
    duplicates: 0,
    noEffect: 0,
    quarantined: 0,
  };
  const quarantinePolicy = config.quarantinePolicy ?? { terminalReasons: [] };
  const actions = config.actions ?? { whaleAlertMinNotional: null };
  const redact = (text: string) => (config.apiKey.length > 0 ? text.split(config.apiKey).join('[REDACTED]') : text);

  const opened = await openPageProgress(pool, { consumerId, stream: config.stream, filter });
  if (opened.kind === 'mismatch') {
    log.warn('page consumer stopped', { consumerId, stop: 'binding_mismatch' });
    const saved = opened.progress;
    return {
      kind: 'binding_mismatch',
      message: opened.reason,
      progress: {
        resumeCursor: saved?.resumeCursor ?? null,
        appliedPosition: saved?.appliedPosition ?? 0,
        version: saved?.version ?? 0,
      },
      counters,
    };
  }
  let current: PageProgress = opened.progress;
  const finish = (stop: PageStop): PageOutcome => {
    if (stop.kind !== 'page_limit' && stop.kind !== 'caught_up' && stop.kind !== 'cancelled') {
      log.warn('page consumer stopped', { consumerId, stop: stop.kind, appliedPosition: current.appliedPosition });
    }
    const { resumeCursor, appliedPosition, version } = current;
    return { ...stop, progress: { resumeCursor, appliedPosition, version }, counters };
  };
  const heartbeat = () =>
    ctx.heartbeat({ appliedPosition: current.appliedPosition, version: current.version, counters: { ...counters } });

  async function request(cursor: string | null): Promise<Answer> {
    const url = new URL(pagePath(config.stream), config.url);
    if (cursor !== null) url.searchParams.set(PAGE_QUERY.cursor, cursor);
    url.searchParams.set(PAGE_QUERY.limit, String(config.limit));
    url.searchParams.set(PAGE_QUERY.filter, canonicalJson(filter));
    counters.requests += 1;
    let res: Response;
    let text: string;
    try {
      res = await fetchPage(url, {
        headers: { authorization: pageAuthorization(config.apiKey), accept: 'application/json' },
        signal: AbortSignal.any([
          ctx.signal,
          AbortSignal.timeout(config.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS),
        ]),
      });
      text = await res.text();
    } catch (error) {
      // Connection refused or reset, a timeout, a body cut short: the same cursor may simply be asked again.
      if (ctx.signal.aborted) throw new Cancelled();
      return {
        kind: 'failed',
        code: 'unavailable',
        retryable: true,
        status: null,
        message: redact(error instanceof Error ? error.message : String(error)),
      };
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
        message: redact(error instanceof Error ? error.message : String(error)),
      };
    }
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

  /** The page to apply, after backing off over non-advancing pages and retryable failures; or why to stop. */
  async function fetchAdvancingPage(cursor: string | null): Promise<{ kind: 'page'; page: PageResponse } | PageStop> {
    for (let attempt = 0; ; attempt++) {
      const answer = await request(cursor);
      let retryAfterMs: number | undefined;
      if (answer.kind === 'reset') {
        const { reason, history, token } = answer.reset;
        return { kind: 'reset', reason, history, refusedToken: token };
      }
      if (answer.kind === 'failed') {
        const { kind: _kind, retryAfterMs: hint, ...failure } = answer;
        if (!answer.retryable || attempt >= config.backoff.maxAttempts) return { kind: 'source_failed', ...failure };
        log.warn('page source failed; backing off with the same cursor', {
          consumerId,
          code: answer.code,
          status: answer.status,
          attempt: attempt + 1,
        });
        retryAfterMs = hint;
      } else {
        const shape = classifyPage(cursor, answer.page, current.appliedPosition);
        if (shape.kind === 'advancing') return answer;
        if (attempt >= config.backoff.maxAttempts)
          return { kind: shape.nothingNew ? 'caught_up' : 'non_advancing', attempts: attempt + 1 };
        if (!shape.nothingNew)
          log.warn('page did not advance its cursor; backing off', {
            consumerId,
            events: answer.page.events.length,
            attempt: attempt + 1,
          });
      }
      heartbeat(); // a long backoff is still a live run
      try {
        await delay(backoffDelay(config.backoff, attempt + 1, retryAfterMs), undefined, { signal: ctx.signal });
      } catch {
        throw new Cancelled();
      }
    }
  }

  /** Durable outcomes for every event of the page, then the cursor swap; a stop when that is not possible. */
  async function applyPage(cursor: string | null, page: PageResponse): Promise<PageStop | null> {
    if (current.historyId !== null && page.history.id !== current.historyId) {
      // The source's journal was rebuilt under this cursor: the same decision as a 410 history_rebuilt.
      return { kind: 'reset', reason: 'history_rebuilt', history: page.history, refusedToken: cursor ?? '' };
    }
    let events: StagedEvent[];
    try {
      events = stagePageEvents(page.events);
    } catch (error) {
      if (!(error instanceof WireError)) throw error;
      return { kind: 'source_failed', code: 'invalid_page', retryable: false, status: 200, message: error.message };
    }
    const orderProblem = journalOrderProblem(events);
    if (orderProblem)
      return {
        kind: 'source_failed',
        code: 'invalid_page',
        retryable: false,
        status: 200,
        message: `page out of journal order: ${orderProblem}`,
      };

    const { recognised, fresh } = splitAtApplied(events, current.appliedPosition);
    if (recognised.length > 0) {
      const recognition = await recognisePageEvents(pool, consumerId, recognised);
      if (recognition.kind !== 'recognised')
        return recognition.kind === 'conflict' ? { ...recognition } : { ...recognition, kind: 'unrecognised_event' };
      counters.recognised += recognition.count;
    }
    for (const chunk of chunkByPosition(fresh, config.chunkSize)) {
      if (ctx.signal.aborted) throw new Cancelled();
      const result = await commitPageChunk(pool, {
        consumerId,
        expectedVersion: current.version,
        events: chunk,
        quarantinePolicy,
        actions,
      });
      // fenced, conflict, held_quarantine: each is a stop of its own, in the same shape
      if (result.kind !== 'committed') return result;
      current = { ...current, appliedPosition: result.appliedPosition, version: result.version };
      counters.chunks += 1;
      counters.applied += result.counts.applied;
      counters.duplicates += result.counts.duplicates;
      counters.noEffect += result.counts.noEffect;
      counters.quarantined += result.counts.quarantined;
      heartbeat();
      await deps.hooks?.afterChunkCommit?.({ appliedPosition: current.appliedPosition, version: current.version });
    }
    const swap = await swapPageCursor(pool, {
      consumerId,
      expectedVersion: current.version,
      next: page.next,
      historyId: page.history.id,
    });
    if (swap.kind === 'fenced') return { kind: 'fenced', actualVersion: swap.actualVersion };
    current = { ...current, resumeCursor: page.next, historyId: page.history.id, version: swap.version };
    counters.pages += 1;
    heartbeat();
    await deps.hooks?.afterCursorSwap?.({ appliedPosition: current.appliedPosition, version: current.version });
    return null;
  }

  try {
    while (input.maxPages === undefined || counters.pages < input.maxPages) {
      if (ctx.signal.aborted) return finish({ kind: 'cancelled' });
      const cursor = current.resumeCursor;
      const fetched = await fetchAdvancingPage(cursor);
      if (fetched.kind !== 'page') return finish(fetched);
      const stop = await applyPage(cursor, fetched.page);
      if (stop) return finish(stop);
    }
    return finish({ kind: 'page_limit' });
  } catch (error) {
    if (error instanceof Cancelled) return finish({ kind: 'cancelled' });
    throw error;
  }
}
