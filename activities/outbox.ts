// The outbox dispatcher: performs the external actions (whale alerts) that commits wrote to the outbox, outside
// any commit. It claims due rows with a lease, POSTs each with its idempotency key, and marks it done; a failed
// call goes back to pending with a backoff (in the database) until its attempts run out, then it is parked as
// `dead` with the error recorded. A replayed checkpoint never inserts a second row for the same key, and a
// completed row is never claimed again, so a restart repeats nothing that was marked done. A crash between a
// POST and its completion redelivers the same key once the lease runs out: the receiver deduplicates on it.
import type { Logger } from '@temporalio/common';
import type pg from 'pg';
import { claimOutbox, completeOutbox, DEFAULT_MAX_OUTBOX_ATTEMPTS, failOutbox, type OutboxItem } from '../db/index.js';
import {
  createWebhookSender,
  DEFAULT_WEBHOOK_TIMEOUT_MS,
  WebhookError,
  type FetchLike,
  type SendAction,
} from './webhook.js';

export interface OutboxDispatcherOptions {
  pool: pg.Pool;
  /** Where whale alerts are POSTed. */
  webhookUrl: string;
  fetch?: FetchLike;
  log: Logger;
  /** Rows claimed per round (default 20). */
  batchSize?: number;
  /** How long a claim is exclusive; must exceed the call timeout so no other dispatcher takes a row in flight. */
  leaseMs?: number;
  /** Pause between rounds when nothing was due (default 1000). */
  idleMs?: number;
  webhookTimeoutMs?: number;
  /** Attempts before a row is parked as dead (default DEFAULT_MAX_OUTBOX_ATTEMPTS). */
  maxAttempts?: number;
}

export interface DispatchRound {
  claimed: number;
  sent: number;
  failed: number;
}

const DEFAULT_BATCH_SIZE = 20;
const DEFAULT_IDLE_MS = 1000;

export class OutboxDispatcher {
  private readonly pool: pg.Pool;
  private readonly send: SendAction;
  private readonly log: Logger;
  private readonly batchSize: number;
  private readonly leaseMs: number;
  private readonly idleMs: number;
  private readonly maxAttempts: number;
  private loop: Promise<void> | null = null;
  private stopping = false;
  private wake: (() => void) | null = null;

  constructor(options: OutboxDispatcherOptions) {
    const timeoutMs = options.webhookTimeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS;
    this.pool = options.pool;
    this.send = createWebhookSender({ url: options.webhookUrl, fetch: options.fetch, timeoutMs });
    this.log = options.log;
    this.batchSize = options.batchSize ?? DEFAULT_BATCH_SIZE;
    this.leaseMs = options.leaseMs ?? Math.max(60_000, timeoutMs * 3);
    this.idleMs = options.idleMs ?? DEFAULT_IDLE_MS;
    this.maxAttempts = options.maxAttempts ?? DEFAULT_MAX_OUTBOX_ATTEMPTS;
    if (this.leaseMs <= timeoutMs) {
      throw new RangeError(`outbox leaseMs (${this.leaseMs}) must exceed the webhook timeout (${timeoutMs})`);
    }
  }

  /** Claims one batch of due rows and performs them, one after another in key order. */
  async dispatchOnce(): Promise<DispatchRound> {
    const items = await claimOutbox(this.pool, { limit: this.batchSize, leaseMs: this.leaseMs });
    const round: DispatchRound = { claimed: items.length, sent: 0, failed: 0 };
    for (const item of items) {
      if (await this.perform(item)) round.sent += 1;
      else round.failed += 1;
    }
    return round;
  }

  /** Runs rounds until stop(): back to back while rows are due, otherwise every idleMs. */
  start(): void {
    if (this.loop) throw new Error('outbox dispatcher already started');
    this.stopping = false;
    this.loop = this.run();
  }

  /** Lets the call in flight finish and be recorded, then returns. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    await this.loop;
    this.loop = null;
  }

  private async run(): Promise<void> {
    this.log.info('outbox dispatcher started', { batchSize: this.batchSize });
    while (!this.stopping) {
      let busy = false;
      try {
        const round = await this.dispatchOnce();
        busy = round.claimed === this.batchSize;
      } catch (error) {
        // The database is away (restart, failover): the rows stay where they are; try again after a pause.
        this.log.warn('outbox round failed; retrying', { error });
      }
      if (!busy && !this.stopping) await this.idle();
    }
    this.log.info('outbox dispatcher stopped');
  }

  private idle(): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
      const timer = setTimeout(done, this.idleMs);
      this.wake = done;
    });
  }

  private async perform(item: OutboxItem): Promise<boolean> {
    const fields = {
      outboxId: item.id,
      idempotencyKey: item.idempotencyKey,
      action: item.action,
      attempt: item.attempts,
    };
    try {
      await this.send(item);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      const retryable = !(error instanceof WebhookError) || error.retryable;
      // A refused request is parked at once: its attempts are used up by definition.
      const maxAttempts = retryable ? this.maxAttempts : item.attempts;
      await failOutbox(this.pool, item.id, message, { maxAttempts });
      const dead = item.attempts >= maxAttempts;
      this.log[dead ? 'error' : 'warn'](dead ? 'outbox action failed for good' : 'outbox action failed; will retry', {
        ...fields,
        error: message,
      });
      return false;
    }
    const completed = await completeOutbox(this.pool, item.id);
    if (!completed) {
      // Our lease ran out mid-call and another dispatcher re-claimed the row: it will send the same key again.
      this.log.warn('outbox row was no longer ours when completed', fields);
    } else {
      this.log.info('outbox action sent', fields);
    }
    return true;
  }
}
