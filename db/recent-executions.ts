// The executions one streaming run recently wrote or read, as the database holds them at the checkpoint version it
// last committed. Corrections usually follow their trade closely, so most of them touch an entity the run itself
// wrote a checkpoint or two before: knowing its row lets the one-statement commit (commit-fast.ts) decide them
// without the read step.
//
// Why the rows are exact: every writer of executions bumps the checkpoint version (or the lease epoch) under the
// checkpoint row lock, so while the fence still reads the version these rows were taken at, nobody changed them;
// the statement that uses them checks exactly that fence. Rows taken at any other version are never used.
import type { ExecutionState } from '../domain/decide.js';
import type { CheckpointFence } from './commit-types.js';

/** Entities kept (most recently written or read): about 0.5 KB each. */
export const RECENT_EXECUTIONS_CAPACITY = 4_096;

export class RecentExecutions {
  #fence: CheckpointFence | null = null;
  /** Insertion order is recency: the first key is the least recently touched. */
  readonly #rows = new Map<string, ExecutionState>();

  constructor(private readonly capacity = RECENT_EXECUTIONS_CAPACITY) {}

  /** The known rows, if they are the database's at `fence`; null when they belong to another version. */
  at(fence: CheckpointFence): ReadonlyMap<string, ExecutionState> | null {
    const held = this.#fence;
    return held !== null && held.leaseEpoch === fence.leaseEpoch && held.version === fence.version ? this.#rows : null;
  }

  /**
   * A commit moved the database from `from` to `to`: `rows` are what it wrote (and what its read step found).
   * Rows known at `from` stay true unless written, so they are kept; rows of another version are dropped first.
   */
  committed(from: CheckpointFence, to: CheckpointFence, rows: Iterable<ExecutionState>): void {
    if (this.at(from) === null) this.#rows.clear();
    for (const row of rows) {
      this.#rows.delete(row.entityId);
      this.#rows.set(row.entityId, row);
    }
    for (const oldest of this.#rows.keys()) {
      if (this.#rows.size <= this.capacity) break;
      this.#rows.delete(oldest);
    }
    this.#fence = to;
  }
}
