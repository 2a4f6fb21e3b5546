import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RecentExecutions } from '../../db/recent-executions.js';
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
