// One HTTP POST per outbox action, signed as the Standard Webhooks specification says. The receiver
// deduplicates on webhook-id, which equals the Idempotency-Key header (the outbox row's key,
// `whale_alert:<eventId>`): the dispatcher's at-least-once delivery becomes effectively once, since a retry
// after a crash between the POST and the completion carries the same id. node:http on a keep-alive agent rather
// than fetch: the dispatcher's CPU per alert was mostly fetch's (bench/results/alerts.md).
import { createHmac } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { OutboxItem } from '../db/index.js';

export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';
export const DEFAULT_WEBHOOK_TIMEOUT_MS = 10_000;

/**
 * Signs with every secret given (the current one first): during a rotation the receiver may still hold the
 * previous secret, and any one matching `v1,` signature verifies. Secrets are `whsec_` + base64, as the
 * specification's libraries take them; the caller validates them (worker/config.ts). node's HMAC, not the
 * standardwebhooks library's pure-JS SHA-256 (20-30 µs an alert); the tests verify every signature with the library.
 */
export function webhookSigner(secrets: readonly string[]): (id: string, timestamp: Date, body: string) => string {
  if (secrets.length === 0) throw new RangeError('a webhook signer needs at least one secret');
  const keys = secrets.map((secret) => Buffer.from(secret.replace(/^whsec_/, ''), 'base64'));
  return (id, timestamp, body) => {
    const signed = `${id}.${Math.floor(timestamp.getTime() / 1000)}.${body}`;
    return keys.map((key) => `v1,${createHmac('sha256', key).update(signed).digest('base64')}`).join(' ');
  };
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

export interface WebhookSenderOptions {
  url: string;
  /** The signing secrets, current first (WHALE_ALERT_SIGNING_SECRET, then ..._PREVIOUS during a rotation). */
  signingSecrets: readonly string[];
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
  const timeoutMs = options.timeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS;
  const sign = webhookSigner(options.signingSecrets);
  const post = keepAlivePost(url, timeoutMs);

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
    try {
      status = await post(
        {
          'content-type': 'application/json',
          [IDEMPOTENCY_KEY_HEADER]: item.idempotencyKey,
          'webhook-id': item.idempotencyKey,
          'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
          'webhook-signature': sign(item.idempotencyKey, timestamp, text),
        },
        text,
      );
    } catch (error) {
      const reason = error instanceof WebhookTimeout ? `no answer within ${timeoutMs} ms` : describeNetworkError(error);
      throw new WebhookError(`webhook ${target} unreachable: ${reason}`, true, null);
    }
    if (status >= 200 && status < 300) return;
    const retryable = status >= 500 || RETRYABLE_CLIENT_STATUSES.has(status);
    throw new WebhookError(`webhook ${target} answered HTTP ${status}`, retryable, status);
  };
}

class WebhookTimeout extends Error {}

/**
 * POSTs to `url` on a keep-alive agent of its own and resolves to the status once the (small) answer has been
 * read to its end, freeing the connection for the next call; the whole exchange is bounded by `timeoutMs`.
 */
function keepAlivePost(
  url: URL,
  timeoutMs: number,
): (headers: Record<string, string>, body: string) => Promise<number> {
  const client = url.protocol === 'https:' ? https : http;
  const agent = new client.Agent({ keepAlive: true });
  return (headers, body) =>
    new Promise<number>((resolve, reject) => {
      const request = client.request(url, {
        method: 'POST',
        agent,
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
      });
      const timer = setTimeout(() => request.destroy(new WebhookTimeout()), timeoutMs);
      const fail = (error: Error): void => {
        clearTimeout(timer);
        reject(error);
      };
      request.once('error', fail);
      request.once('response', (response) => {
        response.once('error', fail);
        response.once('end', () => {
          clearTimeout(timer);
          resolve(response.statusCode ?? 0);
        });
        response.resume();
      });
      request.end(body);
    });
}

function describeNetworkError(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string') return code;
  return error instanceof Error ? error.message : String(error);
}
