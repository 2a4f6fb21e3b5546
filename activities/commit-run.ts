// A store's commitCheckpoints from a commit of one plan at a time: the same contract as db commitCheckpoints
// (one outcome per plan, in order, up to the first that did not commit; each plan fenced on the version the one
// before it committed). For stores that cut into every single commit (tests, the insideCommit hook).
import type { CheckpointOutcome } from '../db/commit-types.js';
import type { CheckpointPlan } from '../protocol/types.js';

export async function commitOneAtATime(
  commit: (plan: CheckpointPlan) => Promise<CheckpointOutcome>,
  plans: readonly CheckpointPlan[],
): Promise<CheckpointOutcome[]> {
  const outcomes: CheckpointOutcome[] = [];
  let fence = plans[0]?.fence;
  for (const plan of plans) {
    const outcome = await commit({ ...plan, fence: fence! });
    outcomes.push(outcome);
    if (outcome.kind !== 'committed') break;
    fence = { leaseEpoch: plan.fence.leaseEpoch, version: outcome.version };
  }
  return outcomes;
}
