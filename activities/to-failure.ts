// The activity side of the failure vocabulary (types-failures.ts): the core's typed errors become Temporal failures
// the workflows' retry policies and switches understand. No failure message that reaches workflow history may carry
// the API key, so every message is scrubbed of it.
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { ConsumerKindMismatch, StaleLeaseAttempt, StorageFailure, UnknownConsumer } from '../db/index.js';
import { UnknownPageConsumer, UnsupportedPageDecision } from '../db/page-decisions.js';
import { redactSecret } from '../protocol/redact.js';
import { runReportOf } from './consume-stream.js';
import { InvalidPageConsumerConfig } from './page-consumer.js';
import { DatabaseBehind, LeaseLost, StreamTransportError } from './stream-errors.js';
import { FailureType } from './types-failures.js';
import type { CheckpointSummary, RunReport } from './types.js';

/**
 * An error as the workflow sees it. A streaming run's failure carries what the run did (`run`: its counters, the
 * database's totals; `committed`), whatever ended it; a cancellation, an abort and a non-Error stay as they are.
 */
export function toFailure(error: unknown, apiKey: string): unknown {
  if (error instanceof CancelledFailure || !(error instanceof Error)) return error;
  const scrub = (text: string): string => redactSecret(text, apiKey);
  const report = runReportOf(error);
  const ran = ranDetails(report);
  if (error instanceof StreamTransportError) {
    return ApplicationFailure.create({
      type: FailureType.StreamTransportError,
      message: scrub(`${error.code}: ${error.message}`),
      details: [{ code: error.code, committed: error.committed, retryAfterMs: error.retryAfterMs ?? null, ...ran }],
      ...(error.retryAfterMs !== undefined ? { nextRetryDelay: error.retryAfterMs } : {}),
    });
  }
  // Already a Temporal failure (e.g. an InvalidDecision an activity built): keep its type and retryability.
  if (error instanceof ApplicationFailure) return error;
  // A configuration that cannot work: the consumer workflow pauses on it until someone fixes it.
  if (error instanceof ConsumerKindMismatch || error instanceof InvalidPageConsumerConfig) {
    return nonRetryableFailure(FailureType.ConfigError, scrub(error.message), { code: error.code });
  }
  // No retry can help: another attempt holds the lease, or the database is behind the workflow.
  if (error instanceof LeaseLost || error instanceof DatabaseBehind || error instanceof StaleLeaseAttempt) {
    return nonRetryableFailure(FailureType[error.name], scrub(error.message), { code: error.code, ...ran });
  }
  if (
    error instanceof UnknownConsumer ||
    error instanceof UnknownPageConsumer ||
    error instanceof UnsupportedPageDecision
  ) {
    return ApplicationFailure.create({ type: FailureType.InvalidDecision, message: error.message, nonRetryable: true });
  }
  if (error instanceof StorageFailure) {
    return ApplicationFailure.create({
      type: FailureType.StorageFailure,
      message: scrub(error.message),
      nonRetryable: !error.retryable,
      // connectionLost: the database went away, and the workflow waits until it answers again.
      details: [{ code: error.code, sqlState: error.sqlState ?? null, connectionLost: error.connectionLost, ...ran }],
    });
  }
  if (error.name === 'AbortError') return error;
  return ApplicationFailure.create({
    type: error.name,
    message: scrub(error.message),
    ...(report ? { details: [ran] } : {}),
  });
}

/** A failure no retry can help, with its one details object. */
function nonRetryableFailure(type: FailureType, message: string, details: Record<string, unknown>): ApplicationFailure {
  return ApplicationFailure.create({ type, message, nonRetryable: true, details: [details] });
}

/** Runs an activity's body; what it throws leaves as toFailure made it. */
export async function guarded<T>(run: () => Promise<T>, apiKey: string): Promise<T> {
  try {
    return await run();
  } catch (error) {
    throw toFailure(error, apiKey);
  }
}

/**
 * guarded, with every failure non-retryable: the server retries a lease only when it timed out (its worker gone);
 * a failure the run raises goes to the workflow, which counts it and backs off.
 */
export async function finalFailures<T>(run: () => Promise<T>, apiKey: string): Promise<T> {
  try {
    return await guarded(run, apiKey);
  } catch (error) {
    if (!(error instanceof ApplicationFailure) || error.nonRetryable) throw error;
    throw ApplicationFailure.create({
      ...(error.type ? { type: error.type } : {}),
      message: error.message,
      ...(error.details ? { details: error.details } : {}),
      nonRetryable: true,
    });
  }
}

/** The failure details of a streaming run's report: the committed checkpoint, and the rest as `run`. */
function ranDetails(report: ReturnType<typeof runReportOf>): { committed?: CheckpointSummary; run?: RunReport } {
  if (report === null) return {};
  const { committed, ...run } = report;
  return { committed, run };
}
