// Whether a checkpoint plan would change anything the database holds. A session that replays nothing up to an
// unchanged cut delivers the saved checkpoint again; committing it would only bump the version (docs/protocol.md §6:
// re-committing the same position is not progress). Such a plan is already committed: the commit writes nothing
// when its quality notices are not newer than the saved ones either (db/commit.ts), and the ACK still follows.
import { canonicalJson } from './canonical.js';
import type { CheckpointPlan, CommittedState } from './types.js';

/** True when the plan holds no events and names exactly the saved checkpoint and binding (notices aside). */
export function namesSavedCheckpoint(plan: CheckpointPlan, saved: CommittedState): boolean {
  const { checkpoint, binding } = plan;
  return (
    plan.events.length === 0 &&
    saved.pendingStart === null &&
    saved.position === checkpoint.position &&
    saved.token === checkpoint.token &&
    saved.generation === checkpoint.generation &&
    saved.cutPosition === checkpoint.cutPosition &&
    saved.cutReached === checkpoint.cutReached &&
    saved.binding !== null &&
    canonicalJson(saved.binding) === canonicalJson(binding)
  );
}
