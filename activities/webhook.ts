// One HTTP POST per outbox action, signed as the Standard Webhooks specification says. The receiver
// deduplicates on webhook-id, which equals the Idempotency-Key header (the outbox row's key,
// `whale_alert:<eventId>`): the dispatcher's at-least-once delivery becomes effectively once, since a retry
// after a crash between the POST and the completion carries the same id.
import { Webhook } from 'standardwebhooks';
import type { OutboxItem } from '../db/index.js';

export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';
export const DEFAULT_WEBHOOK_TIMEOUT_MS = 10_000;

/**
 * Signs with every secret given (the current one first): during a rotation the receiver may still hold the
 * previous secret, and any one matching `v1,` signature verifies. Secrets are `whsec_` + base64, as the
 * specification's libraries take them; the caller validates them (worker/config.ts).
 */
export function webhookSigner(secrets: readonly string[]): (id: string, timestamp: Date, body: string) => string {
  if (secrets.length === 0) throw new RangeError('a webhook signer needs at least one secret');
  const keys = secrets.map((secret) => new Webhook(secret));
  return (id, timestamp, body) => keys.map((key) => key.sign(id, timestamp, body)).join(' ');
}

/** Body of every webhook call: the action and the committed event it came from. */
export interface WebhookBody {
  idempotencyKey: string;
  action: string;
  consumerId: string;
  eventId: string;
  payload: Record<string, unknown>;
}

export class WebhookError extends Error {
  readonly code = 'webhook_failed';
  override readonly name = 'WebhookError';
  constructor(
    message: string,
    /** false: the receiver refused the call itself (e.g. 400); trying again cannot succeed. */
    readonly retryable: boolean,
    readonly status: number | null,
  ) {
    super(message);
  }
}

export type FetchLike = (
  url: string,
  init: { method: string; headers: Record<string, string>; body: string; signal: AbortSignal },
) => Promise<{
  ok: boolean;
  status: number;
}>;

export interface WebhookSenderOptions {
  url: string;
  /** The signing secrets, current first (WHALE_ALERT_SIGNING_SECRET, then ..._PREVIOUS during a rotation). */
  signingSecrets: readonly string[];
  fetch?: FetchLike;
  timeoutMs?: number;
}

export type SendAction = (item: OutboxItem) => Promise<void>;

// Statuses that describe the receiver's momentary state, not the request: worth another attempt.
const RETRYABLE_CLIENT_STATUSES = new Set([408, 409, 425, 429]);

/**
 * A sender that POSTs each action as JSON. Errors never contain the URL (webhook URLs often embed a
 * secret); they name the receiver by its origin only.
 */
export function createWebhookSender(options: WebhookSenderOptions): SendAction {
  const url = new URL(options.url);
  const target = url.origin;
  const doFetch: FetchLike = options.fetch ?? fetchAndDrain;
  const timeoutMs = options.timeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS;
  const sign = webhookSigner(options.signingSecrets);

  return async (item) => {
    const body: WebhookBody = {
      idempotencyKey: item.idempotencyKey,
      action: item.action,
      consumerId: item.consumerId,
      eventId: item.eventId,
      payload: item.payload,
    };
    const text = JSON.stringify(body);
    // Each attempt is signed at its own time: a receiver rejects a timestamp far from its clock.
    const timestamp = new Date();
    let status: number;
    let ok: boolean;
    try {
      ({ status, ok } = await doFetch(url.href, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          [IDEMPOTENCY_KEY_HEADER]: item.idempotencyKey,
          'webhook-id': item.idempotencyKey,
          'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
          'webhook-signature': sign(item.idempotencyKey, timestamp, text),
        },
        body: text,
        signal: AbortSignal.timeout(timeoutMs),
      }));
    } catch (error) {
      const reason =
        error instanceof Error && error.name === 'TimeoutError'
          ? `no answer within ${timeoutMs} ms`
          : describeNetworkError(error);
      throw new WebhookError(`webhook ${target} unreachable: ${reason}`, true, null);
    }
    if (ok) return;
    const retryable = status >= 500 || RETRYABLE_CLIENT_STATUSES.has(status);
    throw new WebhookError(`webhook ${target} answered HTTP ${status}`, retryable, status);
  };
}

/** fetch, reading the (small) answer to its end so the keep-alive connection is free for the next POST. */
const fetchAndDrain: FetchLike = async (input, init) => {
  const response = await fetch(input, init);
  await response.arrayBuffer();
  return response;
};

function describeNetworkError(error: unknown): string {
  // undici puts the useful part (ECONNREFUSED, ENOTFOUND) in the cause; its message is just "fetch failed".
  const cause = error instanceof Error ? (error.cause as { code?: unknown } | undefined) : undefined;
  if (cause && typeof cause.code === 'string') return cause.code;
  return error instanceof Error ? error.message : String(error);
}
