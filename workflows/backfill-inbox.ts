// The backfill's inbox: the decisions every workflow of a consumer shares (pause, resume, gap, quarantine), except
// that a page consumer has no live cut to jump to, so that gap decision is refused before it reaches history.
import type { GapResolution } from './definitions.js';
import type { BackfillPhase, BackfillStatus } from './definitions.js';
import { DecisionInbox } from './consumer-inbox.js';
import { InvalidOperatorInput } from './validation.js';

export class BackfillInbox extends DecisionInbox<BackfillPhase, BackfillStatus> {
  override validateGap(raw: GapResolution): void {
    super.validateGap(raw);
    this.refuseLiveCut(raw);
  }

  override acceptGap(raw: GapResolution): number {
    this.refuseLiveCut(raw);
    return super.acceptGap(raw);
  }

  private refuseLiveCut(raw: GapResolution): void {
    if (raw?.decision === 'live_cut') {
      throw new InvalidOperatorInput(
        `backfill ${this.state.consumerId} has no live cut: decide from_floor or abandon (start the live consumer with --start live_cut instead)`,
      );
    }
  }
}
