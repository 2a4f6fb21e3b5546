// The executions one streaming run recently wrote or read, as the database holds them at the checkpoint version it
// last committed. Corrections usually follow their trade closely, so most of them touch an entity the run itself
// wrote a checkpoint or two before: knowing its row lets the one-statement commit (commit-fast.ts) decide them
// without the read step.
//
// Why the rows are exact: every writer of executions bumps the checkpoint version (or the lease epoch) under the
// checkpoint row lock, so while the fence still reads the version these rows were taken at, nobody changed them;
// the statement that uses them checks exactly that fence. Rows taken at any other version are never used.
import type { ExecutionState } from '../domain/decide.js';
import { SharedBudget } from '../protocol/shared-budget.js';
import type { CheckpointFence } from './commit-types.js';

/** Entities a run keeps at least (the most recently written or read) while few share its process: ~0.5 KB each. */
export const RECENT_EXECUTIONS_CAPACITY = 4_096;
/**
 * Entities all the runs of one process keep between them, as long as each keeps at least the floor: four runs keep
 * the full capacity each. Fifty runs each holding the full capacity kept the worker's peak about 180 MiB higher, for
 * no more throughput (docs/performance.md, under Scale).
 */
export const RECENT_EXECUTIONS_BUDGET = 4 * RECENT_EXECUTIONS_CAPACITY;
/**
 * A run's share never falls below this: the reference stream's corrections reach back at most 512 trades. A
 * correction of an entity its run no longer knows is still decided exactly, after one more read (the exact path).
 */
export const RECENT_EXECUTIONS_FLOOR = 512;

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

  /** `capacity`: a fixed number, or a run's current share of its process's budget (RecentExecutionsBudget). */
  constructor(private readonly capacity: number | (() => number) = RECENT_EXECUTIONS_CAPACITY) {}

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
    const capacity = typeof this.capacity === 'number' ? this.capacity : this.capacity();
    // A commit that touched `capacity` entities or more alone is the older generation: its last `capacity` ones.
    if (rows.length >= capacity) {
      const last = new Map<string, ExecutionState>();
      for (let i = rows.length - 1; i >= 0 && last.size < capacity; i--) {
        const row = rows[i]!;
        if (!last.has(row.entityId)) last.set(row.entityId, row);
      }
      if (last.size === capacity) {
        this.#older = last;
        this.#newer = new Map();
        return;
      }
    }
    const newer = this.#newer;
    for (const row of rows) newer.set(row.entityId, row);
    if (newer.size >= capacity) {
      this.#older = newer;
      this.#newer = new Map();
    }
  }

  #holds(fence: CheckpointFence): boolean {
    const held = this.#fence;
    return held !== null && held.leaseEpoch === fence.leaseEpoch && held.version === fence.version;
  }
}

/**
 * The recent-executions caches of one process's streaming runs, sized together: each run's cache holds its share
 * of RECENT_EXECUTIONS_BUDGET (at most RECENT_EXECUTIONS_CAPACITY, at least RECENT_EXECUTIONS_FLOOR), so that a
 * worker running many consumers does not keep the full capacity for every one of them.
 */
export class RecentExecutionsBudget {
  readonly #shares: SharedBudget;

  constructor(total = RECENT_EXECUTIONS_BUDGET, least = RECENT_EXECUTIONS_FLOOR, most = RECENT_EXECUTIONS_CAPACITY) {
    this.#shares = new SharedBudget({ total, most, least });
  }

  /** A run's cache, sized by its share while the run is open; `close` when the run ends (again is harmless). */
  open(): { recent: RecentExecutions; close(): void } {
    const seat = this.#shares.open();
    return { recent: new RecentExecutions(seat.share), close: seat.close };
  }

  /** Entities each open run keeps at least now. */
  share(): number {
    return this.#shares.share();
  }
}
