import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  RECENT_EXECUTIONS_BUDGET,
  RECENT_EXECUTIONS_CAPACITY,
  RECENT_EXECUTIONS_FLOOR,
  RecentExecutions,
  RecentExecutionsBudget,
} from '../../db/recent-executions.js';
import type { ExecutionState } from '../../domain/decide.js';

function row(entityId: string, revision: number): ExecutionState {
  return {
    entityId,
    revision,
    market: 'm',
    asset: 'a',
    side: 'BUY',
    price: '0.5',
    size: '1',
    notional: '0.5',
    wallet: 'w',
    txHash: 't',
    firstPosition: 1,
    lastPosition: revision,
    eventId: `ev-${entityId}-${revision}`,
  };
}

const fence = (version: number) => ({ leaseEpoch: 1, version });

describe('RecentExecutions', () => {
  it('knows the latest row of at least the `capacity` most recently touched entities, at the version it reached', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 8 }),
        fc.array(fc.array(fc.integer({ min: 0, max: 20 }), { maxLength: 12 }), { maxLength: 12 }),
        (capacity, commits) => {
          const recent = new RecentExecutions(capacity);
          /** entity → its latest revision, in order of last touch (oldest first) */
          const touched = new Map<string, number>();
          let revision = 0;
          commits.forEach((ids, version) => {
            const rows = ids.map((id) => row(`e-${id}`, ++revision));
            recent.committed(fence(version), fence(version + 1), rows);
            for (const r of rows) {
              touched.delete(r.entityId);
              touched.set(r.entityId, r.revision);
            }
            const known = recent.at(fence(version + 1))!;
            expect(known).not.toBeNull();
            for (const [entityId, latest] of [...touched].slice(-capacity)) {
              expect(known.get(entityId)?.revision).toBe(latest);
            }
            // whatever else it knows is the latest row too, never a stale one
            for (const [entityId, latest] of touched) {
              const row = known.get(entityId);
              if (row !== undefined) expect(row.revision).toBe(latest);
            }
            expect(recent.at(fence(version))).toBeNull();
          });
        },
      ),
    );
  });

  it('forgets every row when a commit started from a version it did not hold', () => {
    const recent = new RecentExecutions(4);
    recent.committed(fence(0), fence(1), [row('e-1', 1)]);
    // another attempt moved the consumer to version 5; this run commits from there
    recent.committed(fence(5), fence(6), [row('e-2', 2)]);
    const known = recent.at(fence(6))!;
    expect(known.get('e-1')).toBeUndefined();
    expect(known.get('e-2')?.revision).toBe(2);
  });
});

describe('RecentExecutionsBudget', () => {
  it('gives a few runs the full capacity each and many runs an even share, never below the floor', () => {
    const budget = new RecentExecutionsBudget();
    const open = Array.from({ length: 4 }, () => budget.open());
    expect(budget.share()).toBe(RECENT_EXECUTIONS_CAPACITY);
    open.push(...Array.from({ length: 6 }, () => budget.open()));
    expect(budget.share()).toBe(Math.floor(RECENT_EXECUTIONS_BUDGET / 10));
    open.push(...Array.from({ length: 40 }, () => budget.open()));
    expect(budget.share()).toBe(RECENT_EXECUTIONS_FLOOR);
    // a run that ends gives its share back, once however often it is closed
    for (const run of open.slice(4)) {
      run.close();
      run.close();
    }
    expect(budget.share()).toBe(RECENT_EXECUTIONS_CAPACITY);
  });

  it("sizes each run's cache by the share of the moment: rows beyond it go, the share's newest stay", () => {
    const budget = new RecentExecutionsBudget(8, 2, 4);
    const first = budget.open();
    const commit = (version: number, ids: number[]) =>
      first.recent.committed(
        fence(version),
        fence(version + 1),
        ids.map((id) => row(`e-${id}`, version + 1)),
      );
    commit(0, [1, 2, 3]);
    expect(first.recent.at(fence(1))!.get('e-1')).toBeDefined();
    // three more runs open: the share falls from 4 to 2, so two new rows make the newer generation the older one
    const others = [budget.open(), budget.open(), budget.open()];
    expect(budget.share()).toBe(2);
    commit(1, [4, 5]);
    commit(2, [6, 7]);
    const known = first.recent.at(fence(3))!;
    expect(['e-6', 'e-7'].map((id) => known.get(id)?.revision)).toEqual([3, 3]);
    expect(['e-1', 'e-2', 'e-3'].map((id) => known.get(id))).toEqual([undefined, undefined, undefined]);
    for (const run of [first, ...others]) run.close();
  });
});
