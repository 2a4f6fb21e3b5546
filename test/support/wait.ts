// Bounded condition waits: tests wait on what they expect to see, never on a fixed delay.
import { inspect } from 'node:util';

export interface WaitOptions {
  /** What is awaited, for the timeout message. */
  description: string;
  timeoutMs?: number;
  intervalMs?: number;
}

export class WaitTimeoutError extends Error {
  readonly code = 'wait_timeout';
  constructor(description: string, timeoutMs: number, lastError: unknown) {
    super(
      `timed out after ${timeoutMs} ms waiting for ${description}` +
        (lastError === undefined
          ? ''
          : `; last error: ${lastError instanceof Error ? lastError.message : inspect(lastError)}`),
    );
    this.name = 'WaitTimeoutError';
  }
}

/**
 * Polls `probe` until it returns a value other than undefined/false, within a bounded deadline. Errors from
 * `probe` count as "not yet" (e.g. a query before the workflow's first task) and are reported on timeout.
 */
export async function waitFor<T>(probe: () => Promise<T | undefined | false>, options: WaitOptions): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  const intervalMs = options.intervalMs ?? 100;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() >= deadline) throw new WaitTimeoutError(options.description, timeoutMs, lastError);
    await new Promise((resolveDelay) => setTimeout(resolveDelay, intervalMs));
  }
}
