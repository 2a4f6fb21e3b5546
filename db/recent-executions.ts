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

/** Entities kept at least (the most recently written or read): about 0.5 KB each. */
export const RECENT_EXECUTIONS_CAPACITY = 4_096;

/** The rows a run knows, by entity id. */
export interface KnownExecutions {
  get(entityId: string): ExecutionState | undefined;
}

export class RecentExecutions {
  #fence: CheckpointFence | null = null;
  // Two generations rather than an order of use: a row written costs one Map.set, where keeping the order cost a
  // delete, a set and an eviction per row of every commit (0.4 µs per streamed event in a worker profile). The
  // newer generation shadows the older; once it holds `capacity` rows it becomes the older one, so the `capacity`
  // most recently touched entities are always known.
  #newer = new Map<string, ExecutionState>();
  #older = new Map<string, ExecutionState>();
  readonly #known: KnownExecutions = {
    get: (entityId) => this.#newer.get(entityId) ?? this.#older.get(entityId),
  };

  constructor(private readonly capacity = RECENT_EXECUTIONS_CAPACITY) {}

  /** The known rows, if they are the database's at `fence`; null when they belong to another version. */
  at(fence: CheckpointFence): KnownExecutions | null {
    return this.#holds(fence) ? this.#known : null;
  }

  /**
   * A commit moved the database from `from` to `to`: `rows` are what it wrote (and what its read step found).
   * Rows known at `from` stay true unless written, so they are kept; rows of another version are dropped first.
   */
  committed(from: CheckpointFence, to: CheckpointFence, rows: readonly ExecutionState[]): void {
    if (!this.#holds(from)) {
      this.#newer.clear();
      this.#older.clear();
    }
    this.#fence = to;
    // A commit that touched `capacity` entities or more alone is the older generation: its last `capacity` ones.
    if (rows.length >= this.capacity) {
      const last = new Map<string, ExecutionState>();
      for (let i = rows.length - 1; i >= 0 && last.size < this.capacity; i--) {
        const row = rows[i]!;
        if (!last.has(row.entityId)) last.set(row.entityId, row);
      }
      if (last.size === this.capacity) {
        this.#older = last;
        this.#newer = new Map();
        return;
      }
    }
    const newer = this.#newer;
    for (const row of rows) newer.set(row.entityId, row);
    if (newer.size >= this.capacity) {
      this.#older = newer;
      this.#newer = new Map();
    }
  }

  #holds(fence: CheckpointFence): boolean {
    const held = this.#fence;
    return held !== null && held.leaseEpoch === fence.leaseEpoch && held.version === fence.version;
  }
}
