// Model-based property: whatever the delivery does — random checkpoint boundaries, commits aborted inside the
// transaction, lost ACKs retried, zombie attempts, explicit replays that redeliver applied events — the database
// ends up equal to a plain fold of the journal applied once: same executions, revisions and volumes, to the
// last decimal digit.
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  acquireLease,
  commitCheckpoint,
  commitCheckpoints,
  loadCommitted,
  recordGapDecision,
  RecentExecutions,
  StorageFailure,
  consumerSummary,
} from '../../db/index.js';
import {
  addDecimal,
  compareDecimal,
  formatDecimal,
  notional,
  parseDecimal,
  type Decimal,
} from '../../protocol/decimal.js';
import type { CheckpointPlan, StagedEvent, StartMode } from '../../protocol/types.js';
import { useTestDatabase } from '../support/db.js';
import { committed, correction, makePlan, trade } from '../../bench/fixtures.js';
import { appliedEvents } from './reference-fold.js';
import { dumpState, type ExecutionRow } from './state-dump.js';

const db = useTestDatabase();

beforeAll(async () => {
  // Fault injection inside the commit transaction: while a consumer is listed here, its checkpoint UPDATE (the
  // commit's last statement, after every effect row) raises, so the whole transaction rolls back.
  await db.pool.query(`
    CREATE TABLE test_faults (consumer_id text PRIMARY KEY);
    CREATE FUNCTION test_fault() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF EXISTS (SELECT 1 FROM test_faults WHERE consumer_id = NEW.consumer_id) THEN RAISE EXCEPTION 'injected fault'; END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER test_fault BEFORE UPDATE ON checkpoints FOR EACH ROW EXECUTE FUNCTION test_fault();`);
});

const WHALE_MIN = '50000';
const MARKETS = ['m-a', 'm-b', 'm-c'];
const price = fc.integer({ min: 0, max: 9999 }).map((n) => formatDecimal({ units: BigInt(n), scale: 4 })); // 0..0.9999
const size = fc
  .tuple(fc.integer({ min: 1, max: 999_999 }), fc.integer({ min: 0, max: 3 }))
  .map(([n, scale]) => formatDecimal({ units: BigInt(n), scale }));
const values = fc.record({ market: fc.constantFrom(...MARKETS), price, size });

type Draft = {
  kind: 'trade' | 'correction';
  entity: number;
  revision: number;
  market: string;
  price: string;
  size: string;
};
const draft: fc.Arbitrary<Draft> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc
      .record({
        kind: fc.constant('trade' as const),
        entity: fc.integer({ min: 0, max: 11 }),
        revision: fc.constant(1),
      })
      .chain((e) => values.map((v) => ({ ...e, ...v }))),
  },
  {
    weight: 2,
    arbitrary: fc
      .record({
        kind: fc.constant('correction' as const),
        entity: fc.integer({ min: 0, max: 12 }),
        revision: fc.integer({ min: 2, max: 4 }),
      })
      .chain((e) => values.map((v) => ({ ...e, ...v }))),
  },
);

/** A journal: positions with gaps (filtered delivery), 1..3 matched events per transition. */
const journalArb = fc
  .array(fc.tuple(fc.integer({ min: 1, max: 3 }), fc.array(draft, { minLength: 1, maxLength: 3 })), {
    minLength: 1,
    maxLength: 14,
  })
  .map((transitions) => {
    const events: StagedEvent[] = [];
    let position = 0;
    for (const [gap, drafts] of transitions) {
      position += gap;
      drafts.forEach((d, i) => {
        const data = { market: d.market, price: d.price, size: d.size };
        const more = { ordinal: i + 1, eventId: `ev-${position}-${i + 1}` };
        events.push(
          d.kind === 'trade'
            ? trade(position, `e-${d.entity}`, data, more)
            : correction(position, `e-${d.entity}`, d.revision, data, more),
        );
      });
    }
    return { events, end: position };
  });

type Action =
  | { kind: 'commit'; step: number }
  | { kind: 'abort'; step: number }
  | { kind: 'lost_ack'; step: number }
  | { kind: 'zombie'; step: number }
  | { kind: 'replay'; back: number; step: number }
  /** consecutive checkpoints committed together (group commit) */
  | { kind: 'group'; steps: number[] };
const step = fc.integer({ min: 0, max: 6 });
const actionArb: fc.Arbitrary<Action> = fc.oneof(
  { weight: 4, arbitrary: step.map((s) => ({ kind: 'commit' as const, step: s })) },
  { weight: 1, arbitrary: step.map((s) => ({ kind: 'abort' as const, step: s })) },
  { weight: 1, arbitrary: step.map((s) => ({ kind: 'lost_ack' as const, step: s })) },
  { weight: 1, arbitrary: step.map((s) => ({ kind: 'zombie' as const, step: s })) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.integer({ min: 1, max: 12 }), step)
      .map(([back, s]) => ({ kind: 'replay' as const, back, step: s })),
  },
  {
    weight: 2,
    arbitrary: fc.array(step, { minLength: 2, maxLength: 4 }).map((steps) => ({ kind: 'group' as const, steps })),
  },
);

/** The reference: the journal applied once, in order, by the rules of docs/protocol.md §4. */
function referenceFold(journal: StagedEvent[]) {
  const executions = new Map<string, ExecutionRow>();
  const revisions: { entityId: string; revision: number; eventId: string; notional: string }[] = [];
  for (const event of appliedEvents(journal)) {
    const data = event.data as { market: string; price: string; size: string };
    const row = {
      entityId: event.entityId,
      revision: event.revision,
      market: data.market,
      price: data.price,
      size: data.size,
      notional: notional(data.price, data.size),
    };
    executions.set(event.entityId, row);
    revisions.push({ entityId: row.entityId, revision: row.revision, eventId: event.eventId, notional: row.notional });
  }
  const volumes = new Map<string, { volume: Decimal; count: number }>();
  for (const e of executions.values()) {
    const v = volumes.get(e.market) ?? { volume: { units: 0n, scale: 0 }, count: 0 };
    volumes.set(e.market, { volume: addDecimal(v.volume, parseDecimal(e.notional)), count: v.count + 1 });
  }
  const byEntity = (a: { entityId: string }, b: { entityId: string }) =>
    a.entityId < b.entityId ? -1 : a.entityId > b.entityId ? 1 : 0;
  return {
    executions: [...executions.values()].sort(byEntity),
    revisions: revisions.sort((a, b) => byEntity(a, b) || a.revision - b.revision),
    volumes: Object.fromEntries(
      [...volumes.entries()].sort().map(([m, v]) => [m, `${formatDecimal(v.volume)}/${v.count}`]),
    ),
  };
}

describe('commit path against the reference fold', () => {
  it('holds every effect exactly once after aborts, lost ACKs, zombies and replays', async () => {
    await fc.assert(
      fc.asyncProperty(
        journalArb,
        fc.array(actionArb, { maxLength: 14 }),
        async ({ events: journal, end }, actions) => {
          const consumerId = `model-${randomUUID()}`;
          let lease = await acquireLease(db.pool, consumerId);
          let fence = { leaseEpoch: lease.leaseEpoch, version: lease.version };
          let saved: number | null = null; // the committed position, as the database has it
          let mode: StartMode = 'from_floor'; // explicit first start; later checkpoints of the session resume
          let replayFrom: number | null = null;
          let decisions = 0; // each moves the version without committing a checkpoint

          const planUpTo = (stepBy: number) => {
            const from = replayFrom ?? saved ?? 0;
            const position = Math.min(end, Math.max(saved ?? 0, from) + stepBy);
            const events = journal.filter((e) => e.position > from && e.position <= position);
            return makePlan(consumerId, {
              fence,
              position,
              events,
              startMode: mode,
              terminalReasons: ['unknown_correction_target'],
              whaleAlertMinNotional: WHALE_MIN,
            });
          };
          // The executions the consuming run knows, kept across all its commits and faults as a run keeps them.
          const recent = new RecentExecutions();
          const commit = async (stepBy: number) => {
            const plan = planUpTo(stepBy);
            const [result] = (await commitCheckpoints(db.pool, [plan], recent)).map(committed);
            fence = { leaseEpoch: fence.leaseEpoch, version: result!.version };
            saved = plan.checkpoint.position;
            mode = 'resume';
            replayFrom = null;
            return plan;
          };

          for (const action of actions) {
            switch (action.kind) {
              case 'commit':
                await commit(action.step);
                break;
              case 'group': {
                // The checkpoints a session stages while an earlier one commits: each continues the previous one,
                // all carry the session's start mode and the fence it held when they were staged.
                const plans: CheckpointPlan[] = [];
                let from: number = replayFrom ?? saved ?? 0;
                let floor: number = saved ?? 0;
                for (const stepBy of action.steps) {
                  const position = Math.min(end, Math.max(floor, from) + stepBy);
                  const events = journal.filter((e) => e.position > from && e.position <= position);
                  plans.push(
                    makePlan(consumerId, {
                      fence,
                      position,
                      events,
                      startMode: mode,
                      terminalReasons: ['unknown_correction_target'],
                      whaleAlertMinNotional: WHALE_MIN,
                    }),
                  );
                  from = position;
                  floor = position;
                }
                const outcomes = await commitCheckpoints(db.pool, plans, recent);
                expect(outcomes.map((o) => o.kind)).toEqual(plans.map(() => 'committed'));
                fence = { leaseEpoch: fence.leaseEpoch, version: committed(outcomes.at(-1)!).version };
                saved = plans.at(-1)!.checkpoint.position;
                mode = 'resume';
                replayFrom = null;
                break;
              }
              case 'abort': {
                await db.pool.query('INSERT INTO test_faults VALUES ($1)', [consumerId]);
                try {
                  const plan = planUpTo(action.step);
                  const outcome = await commitCheckpoints(db.pool, [plan], recent).then(
                    ([o]) => o,
                    (error: unknown) => error,
                  );
                  if (
                    plan.events.length === 0 &&
                    plan.checkpoint.position === saved &&
                    (mode as StartMode) === 'resume'
                  ) {
                    // The plan names the saved checkpoint: it writes nothing, so there is nothing to abort.
                    expect(outcome).toMatchObject({ kind: 'committed', version: fence.version });
                  } else {
                    expect(outcome).toBeInstanceOf(StorageFailure);
                  }
                } finally {
                  await db.pool.query('DELETE FROM test_faults WHERE consumer_id = $1', [consumerId]);
                }
                break;
              }
              case 'lost_ack': {
                // Committed, the result was lost, and the attempt retries the very same plan: fenced, no effect.
                const staleFence = fence;
                const plan = await commit(action.step);
                const replayed = await commitCheckpoint(db.pool, { ...plan, fence: staleFence });
                if (fence.version === staleFence.version) {
                  // The plan named the saved checkpoint: nothing was written, so its replay is the same no-op.
                  expect(replayed).toMatchObject({ kind: 'committed', version: staleFence.version });
                } else {
                  expect(replayed).toMatchObject({ kind: 'fenced' });
                }
                break;
              }
              case 'zombie': {
                const zombieFence = fence;
                lease = await acquireLease(db.pool, consumerId);
                fence = { leaseEpoch: lease.leaseEpoch, version: lease.version };
                expect(await commitCheckpoint(db.pool, { ...planUpTo(action.step), fence: zombieFence })).toMatchObject(
                  { kind: 'fenced' },
                );
                break;
              }
              case 'replay': {
                if (saved === null) break;
                // An operator accepts a replay from the floor: the server redelivers events already applied.
                const decided = await recordGapDecision(db.pool, {
                  consumerId,
                  decision: 'from_floor',
                  actor: 'model',
                  reason: 'replay',
                });
                fence = { leaseEpoch: decided.leaseEpoch, version: decided.version };
                decisions += 1;
                mode = 'from_floor';
                replayFrom = Math.max(0, saved - action.back);
                await commit(action.step);
                break;
              }
            }
          }
          while (saved === null || saved < end) await commit(3);

          const state = await dumpState(db.pool, consumerId);
          const reference = referenceFold(journal);
          expect(state.checkpoint?.position).toBe(end);
          expect(state.executions).toEqual(reference.executions);
          expect(state.revisions).toEqual(reference.revisions);
          expect(state.volumes).toEqual(reference.volumes);
          // status counts executions from their markets' counts, which corrections that move markets keep whole.
          expect((await consumerSummary(db.pool, consumerId))?.executions).toBe(state.executions.length);
          // Every journal event has exactly one durable outcome.
          expect(state.receipts.map((r) => r.eventId).sort()).toEqual(journal.map((e) => e.eventId).sort());
          // One alert per qualifying applied revision, never repeated by replays.
          const alerts = reference.revisions.filter(
            (r) => compareDecimal(parseDecimal(r.notional), parseDecimal(WHALE_MIN)) >= 0,
          );
          expect(state.outbox).toEqual(alerts.map((r) => `whale_alert:${r.eventId}`).sort());
          // The row's totals are the database's own: one per applied receipt, one per commit that moved the version.
          expect((await loadCommitted(db.pool, consumerId))?.totals).toEqual({
            eventsApplied: state.receipts.filter((r) => r.outcome === 'applied').length,
            checkpointsCommitted: state.checkpoint!.version - decisions,
          });
        },
      ),
      { numRuns: 40 },
    );
  });

  it('the one-statement commit leaves exactly what the read-decide-write transaction leaves', async () => {
    await fc.assert(
      fc.asyncProperty(
        journalArb,
        fc.array(step, { minLength: 1, maxLength: 8 }),
        async ({ events: journal, end }, steps) => {
          // Two consumers take the same checkpoints; a test cut point inside the transaction keeps the second on
          // the exact path, while the first takes the one-statement commit whenever its events are all new or
          // correct entities its earlier commits wrote (RecentExecutions).
          const run = async (exact: boolean) => {
            const consumerId = `equiv-${randomUUID()}`;
            const lease = await acquireLease(db.pool, consumerId);
            let fence = { leaseEpoch: lease.leaseEpoch, version: lease.version };
            let saved = 0;
            let first = true;
            const outcomes = [];
            const recent = new RecentExecutions();
            for (const stepBy of [...steps, end]) {
              const position = Math.min(end, saved + stepBy);
              const plan = makePlan(consumerId, {
                fence,
                position,
                events: journal.filter((e) => e.position > saved && e.position <= position),
                startMode: first ? 'from_floor' : 'resume',
                terminalReasons: ['unknown_correction_target'],
                whaleAlertMinNotional: WHALE_MIN,
              });
              const outcome = committed(
                exact
                  ? await commitCheckpoint(db.pool, plan, () => undefined)
                  : (await commitCheckpoints(db.pool, [plan], recent))[0]!,
              );
              outcomes.push(outcome);
              fence = { leaseEpoch: fence.leaseEpoch, version: outcome.version };
              saved = position;
              first = false;
            }
            return { outcomes, state: await dumpState(db.pool, consumerId) };
          };
          expect(await run(false)).toEqual(await run(true));
        },
      ),
      { numRuns: 30 },
    );
  });
});
