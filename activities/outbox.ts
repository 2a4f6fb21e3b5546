// The outbox dispatcher: performs the external actions (whale alerts) that commits wrote to the outbox, outside
// any commit. A commit's NOTIFY wakes it (a poll every idleMs covers a lost connection and retries coming due);
// it claims due rows with a lease, POSTs up to `concurrency` of them at once, and marks the sent ones done in
// one statement. A failed call goes back to pending with a backoff (in the database) until its attempts run
// out, then it is parked as `dead` with the error recorded. Per key, one dispatcher at a time: a claim is
// exclusive for its lease, no POST starts unless its timeout ends inside the lease, and every completion is
// fenced on the claim's attempt. A crash between a POST and its completion redelivers the same key once the
// lease runs out: the receiver deduplicates on it (webhook-id).
import type { Logger } from '@temporalio/common';
import type pg from 'pg';
import {
  claimOutbox,
  completeOutbox,
  DEFAULT_MAX_OUTBOX_ATTEMPTS,
  failOutbox,
  listenForDueOutbox,
  releaseOutbox,
  type OutboxClaim,
  type OutboxItem,
  type OutboxListener,
} from '../db/index.js';
import { noMetrics, type ConsumerMetrics } from './metrics.js';
import { createWebhookSender, DEFAULT_WEBHOOK_TIMEOUT_MS, WebhookError, type SendAction } from './webhook.js';

export interface OutboxDispatcherOptions {
  pool: pg.Pool;
  /** Where whale alerts are POSTed. */
  webhookUrl: string;
  /** Standard Webhooks secrets, current first. */
  signingSecrets: readonly string[];
  log: Logger;
  metrics?: Pick<ConsumerMetrics, 'alertSent' | 'alertFailed'>;
  /** POSTs in flight at most (default 8). */
  concurrency?: number;
  /**
   * How long a claim is exclusive (default three call timeouts); it must exceed the call timeout, and no POST
   * starts that could outlive it, so no other dispatcher takes a row in flight.
   */
  leaseMs?: number;
  /** The fallback poll when no notification came (default 1000). */
  idleMs?: number;
  webhookTimeoutMs?: number;
  /** Attempts before a row is parked as dead (default DEFAULT_MAX_OUTBOX_ATTEMPTS). */
  maxAttempts?: number;
  /** Wake on the commits' NOTIFY (default true); off: poll only. */
  listen?: boolean;
}

export const DEFAULT_ALERT_CONCURRENCY = 8;
const DEFAULT_IDLE_MS = 1000;
/** Rows claimed per POST slot: enough to keep every slot busy between claims, few enough to start in the lease. */
const CLAIM_PER_SLOT = 4;
/** After a lost LISTEN connection, try again this long later (polling meanwhile). */
const RELISTEN_MS = 5_000;

interface Claimed {
  item: OutboxItem;
  /** Local clock (ms): the claim's lease ends no earlier than this. */
  leaseEnds: number;
  /** Local clock (ms) when the claim returned, to add to the row's age at the claim. */
  claimedAt: number;
}

export class OutboxDispatcher {
  private readonly pool: pg.Pool;
  private readonly send: SendAction;
  private readonly log: Logger;
  private readonly metrics: Pick<ConsumerMetrics, 'alertSent' | 'alertFailed'>;
  private readonly concurrency: number;
  private readonly leaseMs: number;
  private readonly idleMs: number;
  private readonly timeoutMs: number;
  private readonly maxAttempts: number;
  private readonly listen: boolean;
  private readonly queue: Claimed[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private completions: OutboxClaim[] = [];
  private flushing: Promise<void> | null = null;
  private mayHaveDue = true;
  private loop: Promise<void> | null = null;
  private stopping = false;
  private wake: (() => void) | null = null;
  private listener: OutboxListener | null = null;
  private relisten: NodeJS.Timeout | null = null;

  constructor(options: OutboxDispatcherOptions) {
    this.timeoutMs = options.webhookTimeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS;
    this.pool = options.pool;
    this.send = createWebhookSender({
      url: options.webhookUrl,
      signingSecrets: options.signingSecrets,
      timeoutMs: this.timeoutMs,
    });
    this.log = options.log;
    this.metrics = options.metrics ?? noMetrics;
    this.concurrency = options.concurrency ?? DEFAULT_ALERT_CONCURRENCY;
    this.leaseMs = options.leaseMs ?? this.timeoutMs * 3;
    this.idleMs = options.idleMs ?? DEFAULT_IDLE_MS;
    this.maxAttempts = options.maxAttempts ?? DEFAULT_MAX_OUTBOX_ATTEMPTS;
    this.listen = options.listen ?? true;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) {
      throw new RangeError(`outbox concurrency (${this.concurrency}) must be a positive integer`);
    }
    if (this.leaseMs <= this.timeoutMs) {
      throw new RangeError(`outbox leaseMs (${this.leaseMs}) must exceed the webhook timeout (${this.timeoutMs})`);
    }
  }

  /** Runs until stop(): claims while rows are due, sleeps on the notification or the poll otherwise. */
  start(): void {
    if (this.loop) throw new Error('outbox dispatcher already started');
    this.stopping = false;
    // Whatever was due while it was stopped is claimed at once, not at the next poll.
    this.mayHaveDue = true;
    this.loop = this.run();
  }

  /** Lets the calls in flight finish and be recorded, gives back what was claimed and not started, then returns. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.notify();
    await this.loop;
    this.loop = null;
  }

  /** Claims and performs everything due now, then returns (for scripts and tests that drive it by hand). */
  async drain(): Promise<void> {
    this.mayHaveDue = true;
    while (this.mayHaveDue || this.queue.length > 0 || this.inFlight.size > 0) {
      await this.step();
      if (this.inFlight.size > 0) await Promise.race(this.inFlight);
    }
    await this.flush();
  }

  private async run(): Promise<void> {
    this.log.info('outbox dispatcher started', { concurrency: this.concurrency, listen: this.listen });
    if (this.listen) await this.startListening();
    while (!this.stopping) {
      await this.step();
      if (this.stopping) break;
      const saturated = this.inFlight.size >= this.concurrency;
      if (saturated || (this.queue.length === 0 && !this.mayHaveDue)) await this.sleep();
    }
    if (this.relisten) clearTimeout(this.relisten);
    await this.listener?.close();
    await Promise.all(this.inFlight);
    await this.giveBack(this.queue.splice(0));
    await this.flush();
    this.log.info('outbox dispatcher stopped');
  }

  /** Claims when the queue is empty and rows may be due, then starts POSTs while slots are free. */
  private async step(): Promise<void> {
    if (this.queue.length === 0 && this.mayHaveDue && this.inFlight.size < this.concurrency) {
      const limit = this.concurrency * CLAIM_PER_SLOT;
      const before = Date.now();
      // Cleared before the claim, so a notification that arrives while it runs (its row maybe not yet visible
      // to the claim's snapshot) sets it again and is not lost.
      this.mayHaveDue = false;
      try {
        const items = await claimOutbox(this.pool, { limit, leaseMs: this.leaseMs });
        const claimedAt = Date.now();
        for (const item of items) this.queue.push({ item, leaseEnds: before + this.leaseMs, claimedAt });
        if (items.length === limit) this.mayHaveDue = true;
      } catch (error) {
        // The database is away (restart, failover): the rows stay where they are; the poll tries again.
        this.log.warn('outbox claim failed; retrying', { error });
      }
    }
    const expired: Claimed[] = [];
    while (this.queue.length > 0 && this.inFlight.size < this.concurrency) {
      const claimed = this.queue.shift()!;
      // A POST that could still be running when the lease ends might overlap another dispatcher's: give it back.
      if (Date.now() + this.timeoutMs >= claimed.leaseEnds) expired.push(claimed);
      else this.launch(claimed);
    }
    await this.giveBack(expired);
  }

  private launch(claimed: Claimed): void {
    const call = this.perform(claimed).finally(() => {
      this.inFlight.delete(call);
      this.notify();
    });
    this.inFlight.add(call);
  }

  private async perform({ item, claimedAt }: Claimed): Promise<void> {
    const fields = {
      outboxId: item.id,
      idempotencyKey: item.idempotencyKey,
      action: item.action,
      attempt: item.attempts,
    };
    const delaySeconds = (item.ageMs + Date.now() - claimedAt) / 1000;
    try {
      await this.send(item);
    } catch (error) {
      await this.recordFailure(item, error, fields);
      return;
    }
    this.metrics.alertSent(delaySeconds);
    this.log.debug('outbox action sent', fields);
    this.completions.push({ id: item.id, attempts: item.attempts });
    void this.flush();
  }

  private async recordFailure(item: OutboxItem, error: unknown, fields: Record<string, unknown>): Promise<void> {
    const message = error instanceof Error ? error.message : String(error);
    const retryable = !(error instanceof WebhookError) || error.retryable;
    // A refused request is parked at once: its attempts are used up by definition.
    const maxAttempts = retryable ? this.maxAttempts : item.attempts;
    let dead = false;
    try {
      dead = await failOutbox(this.pool, item, message, { maxAttempts });
    } catch (storeError) {
      // Left claimed: once the lease runs out the row is due again and the attempt counts as made.
      this.log.warn('outbox failure could not be recorded', { ...fields, error: storeError });
    }
    this.metrics.alertFailed(dead);
    this.log[dead ? 'error' : 'warn'](dead ? 'outbox action failed for good' : 'outbox action failed; will retry', {
      ...fields,
      error: message,
    });
  }

  /**
   * Marks the sent rows done, all that are waiting in one statement; while it runs, more gather for the next
   * one. A lost completion leaves the row claimed: it is sent again after its lease with the same key.
   */
  private flush(): Promise<void> {
    this.flushing ??= (async () => {
      while (this.completions.length > 0) {
        const claims = this.completions;
        this.completions = [];
        try {
          const done = await completeOutbox(this.pool, claims);
          if (done.length < claims.length) {
            // A lease ran out mid-call and another dispatcher re-claimed the row: it will send the same key again.
            this.log.warn('outbox rows were no longer ours when completed', { rows: claims.length - done.length });
          }
        } catch (error) {
          this.log.warn('outbox completions could not be recorded; the rows are sent again after their lease', {
            rows: claims.length,
            error,
          });
        }
      }
    })().finally(() => {
      this.flushing = null;
    });
    return this.flushing;
  }

  private async giveBack(claims: Claimed[]): Promise<void> {
    if (claims.length === 0) return;
    try {
      await releaseOutbox(
        this.pool,
        claims.map(({ item }) => item),
      );
    } catch (error) {
      this.log.warn('outbox claims could not be given back; they are due again after their lease', { error });
    }
  }

  private async startListening(): Promise<void> {
    try {
      this.listener = await listenForDueOutbox(
        this.pool,
        () => {
          this.mayHaveDue = true;
          this.notify();
        },
        (error) => {
          this.log.warn('outbox notifications lost; polling until they are back', { error });
          this.listener = null;
          this.scheduleRelisten();
        },
      );
    } catch (error) {
      this.log.warn('outbox notifications unavailable; polling', { error });
      this.scheduleRelisten();
    }
  }

  private scheduleRelisten(): void {
    if (this.stopping || this.relisten) return;
    this.relisten = setTimeout(() => {
      this.relisten = null;
      if (!this.stopping) void this.startListening();
    }, RELISTEN_MS);
    this.relisten.unref();
  }

  private notify(): void {
    this.wake?.();
  }

  /** Until a notification, a finished POST, stop(), or the poll. */
  private sleep(): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
      const timer = setTimeout(() => {
        this.mayHaveDue = true;
        done();
      }, this.idleMs);
      this.wake = done;
    });
  }
}
