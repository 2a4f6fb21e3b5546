// Started by a Temporal Schedule (or by hand): asks a consumer to rebind to a new filter and succeeds once
// the database holds a commit at generation + 1. Fails with a clear reason when the consumer is not running
// or refuses the rebind (it awaits a decision, is paused, or is already rebinding).
import {
  ApplicationFailure,
  CancellationScope,
  condition,
  getExternalWorkflowHandle,
  isCancellation,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../activities/index.js';
import { FailureType } from '../activities/types-failures.js';
import { consumerWorkflowId, rebindRejectedSignal, rebindSignal } from './definitions.js';
import type { RebindRejection, RebindWorkflowInput } from './definitions.js';
import { parseRebindRequest } from './validation.js';

/** How long a rebind may take to commit its first checkpoint at the new generation. */
export const REBIND_WAIT_MS = 10 * 60_000;

export interface RebindResult {
  consumerId: string;
  generation: number;
  position: number | null;
}

export async function rebindWorkflow(input: RebindWorkflowInput & { waitMs?: number }): Promise<RebindResult> {
  const request = parseRebindRequest({ filter: input.filter, requestedBy: input.requestedBy });
  const waitMs = input.waitMs ?? REBIND_WAIT_MS;
  const { loadCommitted } = proxyActivities<Activities>({ startToCloseTimeout: 30_000, retry: { maximumAttempts: 5 } });
  const { waitForGeneration } = proxyActivities<Activities>({
    startToCloseTimeout: waitMs + 30_000,
    heartbeatTimeout: 10_000,
    retry: { maximumAttempts: 3, nonRetryableErrorTypes: [FailureType.GenerationNotReached] },
  });

  let rejection: RebindRejection | null = null;
  setHandler(rebindRejectedSignal, (rejected) => {
    rejection = rejected;
  });

  const before = await loadCommitted({ consumerId: input.consumerId });
  if (before.abandoned) {
    throw ApplicationFailure.nonRetryable(
      `consumer ${input.consumerId} was abandoned: nothing to rebind`,
      'ConsumerNotRunning',
    );
  }
  if (before.summary.generation === null) {
    throw ApplicationFailure.nonRetryable(
      `consumer ${input.consumerId} has no committed checkpoint yet: nothing to rebind from`,
      'NothingToRebind',
    );
  }
  const target = before.summary.generation + 1;

  const consumerId = consumerWorkflowId(input.consumerId);
  try {
    await getExternalWorkflowHandle(consumerId).signal(rebindSignal, {
      ...request,
      replyTo: workflowInfo().workflowId,
    });
  } catch (error) {
    throw ApplicationFailure.nonRetryable(
      `consumer workflow ${consumerId} is not running: ${error instanceof Error ? error.message : String(error)}`,
      'ConsumerNotRunning',
    );
  }

  // Either the consumer refuses (it signals back) or generation + 1 shows up in the database.
  const waiting = new CancellationScope();
  const reached = waiting.run(() =>
    waitForGeneration({ consumerId: input.consumerId, generation: target, timeoutMs: waitMs }),
  );
  // Left pending when the generation arrives first; a workflow may finish with a condition unresolved.
  void condition(() => rejection !== null).then(() => waiting.cancel());
  try {
    const after = await reached;
    return {
      consumerId: input.consumerId,
      generation: after.summary.generation ?? target,
      position: after.summary.position,
    };
  } catch (error) {
    const refusal = rejection as RebindRejection | null;
    if (refusal !== null && isCancellation(error)) {
      throw ApplicationFailure.nonRetryable(
        `consumer ${input.consumerId} refused the rebind: ${refusal.reason}`,
        'RebindRefused',
        refusal,
      );
    }
    throw error;
  }
}
