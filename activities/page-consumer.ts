// The Temporal-agnostic core of a paginated history consumer (docs/protocol.md §8):
//   fetch the page at the saved cursor → recognise the events inside the durable prefix by their receipts →
//   give the rest durable outcomes in chunks (each one transaction: effects, receipts, applied_position) →
//   only then replace the cursor with the page's `next`, by one compare-and-swap.
// A crash anywhere resumes from the saved cursor; an overlapping or repeated page is recognised, never
// reapplied. A non-advancing page is never applied: the reader backs off a bounded number of times and stops.
// A run given a target (a position, or `head`: the head its first page answers with) ends once the target is
// reached, so a history that keeps growing does not keep it paging one live transition at a time.
import { setTimeout as delay } from 'node:timers/promises';
import type { HeldQuarantineItem } from '../domain/outcomes.js';
import type { ChunkResult, CursorSwap, OpenPageProgress, PageChunk, PageProgress, Recognition } from '../db/pages.js';
import { WireError, type History, type PageResponse, type ResetReason, type StreamFilter } from '../protocol/codec.js';
import { backoffDelay, type Backoff } from '../protocol/backoff.js';
import {
  chunkByPosition,
  classifyPage,
  journalOrderProblem,
  splitAtApplied,
  stagePageEvents,
} from '../protocol/pages.js';
import { NO_ACTIONS, type ActionRules, type QuarantinePolicy, type StagedEvent } from '../protocol/types.js';
import type { ConsumeStreamLog } from './stream-ports.js';
import { requestPage, type PageAnswer, type PageFailureCode, type PageSourceConfig } from './page-source.js';
import { emptyPageCounters, type PageCounters } from './types.js';

export interface PageConsumerConfig extends PageSourceConfig {
  /** Events per durable chunk (a position is never split, so a chunk can be larger). */
  chunkSize: number;
  /** Bounds the repeats of a non-advancing page and of retryable failures. */
  backoff: Backoff;
  /** Default: every quarantine reason is held. */
  quarantinePolicy?: QuarantinePolicy;
  /** Default: no whale alerts. */
  actions?: ActionRules;
}

export interface PageConsumerHooks {
  /** Before a chunk's transaction (test cut point): its events' positions, in journal order. */
  beforeChunkCommit?(chunk: { firstPosition: number; lastPosition: number }): void | Promise<void>;
  /** After a chunk's transaction committed (test cut point: throw to simulate a crash). */
  afterChunkCommit?(progress: { appliedPosition: number; version: number }): void | Promise<void>;
  /** Every event of the page has a durable outcome; the cursor swap comes next. */
  beforeCursorSwap?(progress: { appliedPosition: number; version: number }): void | Promise<void>;
  /** After a page's `next` replaced the cursor. */
  afterCursorSwap?(progress: { appliedPosition: number; version: number }): void | Promise<void>;
  /**
   * Not the page run's: the backfill's handover activity runs it inside the handover's transaction, before its
   * commit (test cut point: kill -9 after the target was reached, before the handover is durable).
   */
  insideHandover?(progress: { appliedPosition: number }): void | Promise<void>;
}

/** Where a page consumer keeps its progress and makes its chunks durable: the db/pages.ts functions on a pool. */
export interface PageStore {
  openPageProgress(binding: { consumerId: string; stream: string; filter: StreamFilter }): Promise<OpenPageProgress>;
  recognisePageEvents(consumerId: string, events: readonly StagedEvent[]): Promise<Recognition>;
  commitPageChunk(chunk: PageChunk): Promise<ChunkResult>;
  swapPageCursor(swap: {
    consumerId: string;
    expectedVersion: number;
    next: string;
    historyId: string;
  }): Promise<CursorSwap>;
  /** Saves the retention floor a page announced, which maintenance prunes receipts below. */
  recordFloor?(consumerId: string, history: { id: string; floor: number }): Promise<void>;
}

export interface PageConsumerDeps {
  store: PageStore;
  config: PageConsumerConfig;
  /** Default: the global fetch. */
  fetch?: typeof fetch;
  log: ConsumeStreamLog;
  hooks?: PageConsumerHooks;
}

/**
 * Where a run ends. A fixed target is a position of one history (`historyId` null: bound to the history of the
 * run's first page); `head` fixes it at the head the run's first page answers with (`history.head`: the newest
 * position the source held when it answered).
 */
export type PageTarget = { position: number; historyId: string | null } | 'head';

/** A fixed target as a run worked to it. */
export interface FixedPageTarget {
  position: number;
  historyId: string;
}

export interface ConsumePagesInput {
  consumerId: string;
  /** Fixed per consumer: the source binds cursors to it. */
  filter: StreamFilter;
  /**
   * Stop with `page_limit` after this many pages whose cursor was replaced; default: until the source stops advancing.
   */
  maxPages?: number;
  /**
   * Stop with `target_reached` once the applied position is at or past it, or once the source says the reader is
   * at its head (a non-advancing page with nothing new) at or past it. Default: no target; the run ends when the
   * source repeats its cursor through the whole backoff (`caught_up`), which a growing history never does.
   */
  target?: PageTarget;
}

/** Small: never a page, never the key. */
export interface PageHeartbeat {
  appliedPosition: number;
  version: number;
  counters: PageCounters;
  /** The run's target once fixed (a retried attempt keeps it), and the source's head as last answered. */
  target?: FixedPageTarget | null;
  head?: number | null;
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
  /**
   * The target is reached: `applied`, the applied position is at or past it; `head`, the source answered the saved
   * cursor with a non-advancing page with nothing new (the reader is at its head) and that head is at or past it.
   */
  | { kind: 'target_reached'; by: 'applied' | 'head' }
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
      code: PageFailureCode;
      /** true when the failure was retryable and the backoff bound ran out. */
      retryable: boolean;
      status: number | null;
      message: string;
    }
  | { kind: 'cancelled' };

export type PageOutcome = PageStop & {
  progress: PageProgressView;
  counters: PageCounters;
  /** The target the run worked to (absent in outcomes of older runs; null: none). */
  target?: FixedPageTarget | null;
  /** The history the source last answered with: its id, floor and head (absent in older outcomes). */
  sourceHistory?: History | null;
};

/** The normal ends of a run: not logged as stops. */
const QUIET_STOPS: ReadonlySet<PageStop['kind']> = new Set(['page_limit', 'caught_up', 'target_reached', 'cancelled']);

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
  const { store, config, log } = deps;
  checkConfig(config);
  const { consumerId, filter } = input;
  const counters = emptyPageCounters();
  const opened = await store.openPageProgress({ consumerId, stream: config.stream, filter });
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
  return new PageRun(deps, input, ctx, opened.progress, counters).run();
}

class PageRun {
  #current: PageProgress;
  /** The fixed target (null: none, or `head` not fixed yet). */
  #target: FixedPageTarget | null;
  #history: History | null = null;
  /** The floor this run last saved: a page announcing the same one saves nothing. */
  #savedFloor: { id: string; floor: number } | null = null;

  constructor(
    private readonly deps: PageConsumerDeps,
    private readonly input: ConsumePagesInput,
    private readonly ctx: ConsumePagesContext,
    progress: PageProgress,
    private readonly counters: PageCounters,
  ) {
    this.#current = progress;
    const target = input.target;
    // A target given with its history is fixed now: a run resumed at or past it asks the source nothing.
    this.#target =
      target !== undefined && target !== 'head' && target.historyId !== null
        ? { position: target.position, historyId: target.historyId }
        : null;
  }

  async run(): Promise<PageOutcome> {
    const { maxPages } = this.input;
    try {
      for (;;) {
        if (this.#appliedReachedTarget()) return this.#finish({ kind: 'target_reached', by: 'applied' });
        if (maxPages !== undefined && this.counters.pages >= maxPages) return this.#finish({ kind: 'page_limit' });
        if (this.ctx.signal.aborted) return this.#finish({ kind: 'cancelled' });
        const cursor = this.#current.resumeCursor;
        const fetched = await this.#fetchAdvancingPage(cursor);
        if (fetched.kind !== 'page') return this.#finish(fetched);
        const stop = await this.#applyPage(cursor, fetched.page);
        if (stop) return this.#finish(stop);
      }
    } catch (error) {
      if (error instanceof Cancelled) return this.#finish({ kind: 'cancelled' });
      throw error;
    }
  }

  #finish(stop: PageStop): PageOutcome {
    if (!QUIET_STOPS.has(stop.kind)) {
      this.deps.log.warn('page consumer stopped', {
        consumerId: this.input.consumerId,
        stop: stop.kind,
        appliedPosition: this.#current.appliedPosition,
      });
    }
    const { resumeCursor, appliedPosition, version } = this.#current;
    return {
      ...stop,
      progress: { resumeCursor, appliedPosition, version },
      counters: this.counters,
      target: this.#target,
      sourceHistory: this.#history,
    };
  }

  #heartbeat(): void {
    const { appliedPosition, version } = this.#current;
    this.ctx.heartbeat({
      appliedPosition,
      version,
      counters: { ...this.counters },
      target: this.#target,
      head: this.#history?.head ?? null,
    });
  }

  /** Whether the applied position is at or past the fixed target. */
  #appliedReachedTarget(): boolean {
    return this.#target !== null && this.#current.appliedPosition >= this.#target.position;
  }

  /**
   * Takes the history of a page answer: fixes a `head` target at the first one, binds a target to its history, and
   * answers a reset when the answer belongs to another history than the target's (it can no longer be reached).
   */
  #seeHistory(history: History, cursor: string | null): PageStop | null {
    this.#history = history;
    // The source's journal was rebuilt under the saved cursor (also checked before a page is applied): a repeated
    // cursor of another history says nothing about this one's head.
    const saved = this.#current.historyId;
    if (saved !== null && history.id !== saved)
      return { kind: 'reset', reason: 'history_rebuilt', history, refusedToken: cursor ?? '' };
    const wanted = this.input.target;
    if (wanted === undefined) return null;
    if (this.#target === null) {
      this.#target =
        wanted === 'head'
          ? { position: history.head, historyId: history.id }
          : { position: wanted.position, historyId: wanted.historyId ?? history.id };
    }
    if (this.#target.historyId !== history.id) {
      return { kind: 'reset', reason: 'history_rebuilt', history, refusedToken: cursor ?? '' };
    }
    return null;
  }

  async #request(cursor: string | null): Promise<Exclude<PageAnswer, { kind: 'cancelled' }>> {
    this.counters.requests += 1;
    const { filter } = this.input;
    const answer = await requestPage(this.deps.config, cursor, {
      filter,
      signal: this.ctx.signal,
      ...(this.deps.fetch ? { fetch: this.deps.fetch } : {}),
    });
    if (answer.kind === 'cancelled') throw new Cancelled();
    return answer;
  }

  /** The page to apply, after backing off over non-advancing pages and retryable failures; or why to stop. */
  async #fetchAdvancingPage(cursor: string | null): Promise<{ kind: 'page'; page: PageResponse } | PageStop> {
    const { config, log } = this.deps;
    const { consumerId } = this.input;
    for (let attempt = 0; ; attempt++) {
      const answer = await this.#request(cursor);
      let retryAfterMs: number | undefined;
      if (answer.kind === 'reset') {
        const { reason, history, token } = answer.reset;
        this.#history = history;
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
        const seen = this.#seeHistory(answer.page.history, cursor);
        if (seen) return seen;
        await this.#recordFloor(answer.page.history);
        const shape = classifyPage(cursor, answer.page, this.#current.appliedPosition);
        if (shape.kind === 'advancing') return answer;
        // The reader is at the source's head: past the target, that is the target reached (a sparse filter may
        // have no event at or past it to move the applied position there).
        if (shape.nothingNew && this.#target !== null && answer.page.history.head >= this.#target.position)
          return { kind: 'target_reached', by: 'head' };
        if (attempt >= config.backoff.maxAttempts)
          return { kind: shape.nothingNew ? 'caught_up' : 'non_advancing', attempts: attempt + 1 };
        if (!shape.nothingNew)
          log.warn('page did not advance its cursor; backing off', {
            consumerId,
            events: answer.page.events.length,
            attempt: attempt + 1,
          });
      }
      this.#heartbeat(); // a long backoff is still a live run
      try {
        await delay(backoffDelay(config.backoff, attempt + 1, retryAfterMs), undefined, { signal: this.ctx.signal });
      } catch {
        throw new Cancelled();
      }
    }
  }

  /**
   * Saves the page's floor, as a stream session saves its hello's, so that maintenance prunes a backfill's receipts
   * too (one that tails, or never hands over, would keep every receipt). A failure is logged, never a stop: a
   * floor saved late removes nothing it should not.
   */
  async #recordFloor(history: History): Promise<void> {
    const saved = this.#savedFloor;
    if (saved !== null && saved.id === history.id && saved.floor === history.floor) return;
    try {
      await this.deps.store.recordFloor?.(this.input.consumerId, history);
      this.#savedFloor = { id: history.id, floor: history.floor };
    } catch (error) {
      this.deps.log.warn('could not save the retention floor', {
        consumerId: this.input.consumerId,
        historyId: history.id,
        floor: history.floor,
        error: error instanceof Error ? error.message : String(error),
      });
    }
  }

  /** Durable outcomes for every event of the page, then the cursor swap; a stop when that is not possible. */
  async #applyPage(cursor: string | null, page: PageResponse): Promise<PageStop | null> {
    if (this.#current.historyId !== null && page.history.id !== this.#current.historyId) {
      // The source's journal was rebuilt under this cursor: the same decision as a 410 history_rebuilt.
      return { kind: 'reset', reason: 'history_rebuilt', history: page.history, refusedToken: cursor ?? '' };
    }
    let events: StagedEvent[];
    try {
      events = stagePageEvents(page.events, Date.now());
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

    const { recognised, fresh } = splitAtApplied(events, this.#current.appliedPosition);
    if (recognised.length > 0) {
      const recognition = await this.deps.store.recognisePageEvents(this.input.consumerId, recognised);
      if (recognition.kind !== 'recognised')
        return recognition.kind === 'conflict' ? { ...recognition } : { ...recognition, kind: 'unrecognised_event' };
      this.counters.recognised += recognition.count;
    }
    for (const chunk of chunkByPosition(fresh, this.deps.config.chunkSize)) {
      if (this.ctx.signal.aborted) throw new Cancelled();
      const stop = await this.#applyChunk(chunk);
      if (stop) return stop;
    }
    return this.#swapCursor(page);
  }

  /** One chunk's durable outcomes, in one transaction fenced on the progress version. */
  async #applyChunk(chunk: StagedEvent[]): Promise<PageStop | null> {
    const { store, config, hooks } = this.deps;
    await hooks?.beforeChunkCommit?.({ firstPosition: chunk[0]!.position, lastPosition: chunk.at(-1)!.position });
    const result = await store.commitPageChunk({
      consumerId: this.input.consumerId,
      expectedVersion: this.#current.version,
      events: chunk,
      quarantinePolicy: config.quarantinePolicy ?? { terminalReasons: [] },
      actions: config.actions ?? NO_ACTIONS,
    });
    // fenced, conflict, held_quarantine: each is a stop of its own, in the same shape
    if (result.kind !== 'committed') return result;
    this.#current = { ...this.#current, appliedPosition: result.appliedPosition, version: result.version };
    const counters = this.counters;
    counters.chunks += 1;
    counters.applied += result.counts.applied;
    counters.duplicates += result.counts.duplicates;
    counters.noEffect += result.counts.noEffect;
    counters.quarantined += result.counts.quarantined;
    this.#heartbeat();
    await hooks?.afterChunkCommit?.({ appliedPosition: this.#current.appliedPosition, version: this.#current.version });
    return null;
  }

  /** Replaces the cursor with the page's `next`, by one compare-and-swap on the progress version. */
  async #swapCursor(page: PageResponse): Promise<PageStop | null> {
    await this.deps.hooks?.beforeCursorSwap?.({
      appliedPosition: this.#current.appliedPosition,
      version: this.#current.version,
    });
    const swap = await this.deps.store.swapPageCursor({
      consumerId: this.input.consumerId,
      expectedVersion: this.#current.version,
      next: page.next,
      historyId: page.history.id,
    });
    if (swap.kind === 'fenced') return { kind: 'fenced', actualVersion: swap.actualVersion };
    this.#current = { ...this.#current, resumeCursor: page.next, historyId: page.history.id, version: swap.version };
    this.counters.pages += 1;
    this.#heartbeat();
    await this.deps.hooks?.afterCursorSwap?.({
      appliedPosition: this.#current.appliedPosition,
      version: this.#current.version,
    });
    return null;
  }
}
