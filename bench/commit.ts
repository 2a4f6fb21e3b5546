// Commit throughput: commitCheckpoint against a minimal hand-written transaction of the same shape (dedup
// INSERT + effects UPSERT + checkpoint UPDATE), on the same scratch database, in the same run, interleaved so
// both see the same machine. With a baseline, the baseline tree's commitCheckpoint runs too, on a scratch
// database of its own migrated by that tree, in the same interleaving. Then the latency of a 1-event checkpoint's
// commit, as the streaming run commits it, against a bare one-row commit on the same pool. Writes
// bench/results/commit.json and commit.md.
import type pg from 'pg';
import { createPool } from '../db/index.js';
import { contentHashArray } from '../db/content-hash-column.js';
import type * as Db from '../db/index.js';
import { notional, compareDecimal, parseDecimal } from '../protocol/decimal.js';
import { freshCheckpoints, WHALE_ALERT_MIN_NOTIONAL } from './fixtures.js';
import { createLeanTables } from './lean-statement.js';
import type { CheckpointPlan } from '../protocol/types.js';
import {
  describeMachine,
  importFrom,
  machineState,
  percentile,
  round,
  table,
  withScratchDatabase,
  writeResults,
  type BenchContext,
  type Target,
} from './support.js';

/** Checkpoint sizes; BENCH_SIZES=100,1000 narrows a run while investigating. */
const SIZES = (process.env.BENCH_SIZES ?? '1,100,1000,10000').split(',').map(Number);
/** Enough iterations for a stable p50 and a meaningful p99 at small sizes, bounded time at large ones. */
export const ITERATIONS: Record<number, number> = { 1: 400, 100: 150, 1_000: 40, 10_000: 8 };
export const DEFAULT_ITERATIONS = 20;
export const WARMUP = 3;
/** Samples of each single-event latency series; BENCH_LATENCY_SAMPLES=100 shortens a run. */
const LATENCY_SAMPLES = Number(process.env.BENCH_LATENCY_SAMPLES ?? 500);
const LATENCY_WARMUP = 20;

interface Series {
  /** events / summed latency over all iterations */
  eventsPerSecond: number;
  /** events / median latency: robust to the scheduling stalls of a shared machine */
  eventsPerSecondAtP50: number;
  p50Ms: number;
  p99Ms: number;
  iterations: number;
}
interface Row {
  size: number;
  /** this tree's commitCheckpoint */
  commitCheckpoint: Series;
  /** the baseline tree's commitCheckpoint, when a baseline is measured */
  before: Series | null;
  handWritten: Series;
  /** commitCheckpoint events/s divided by the hand-written one's (mean-based). */
  ratio: number;
  /** the same ratio from median latencies */
  ratioAtP50: number;
  /** the baseline's commitCheckpoint against the same hand-written runs */
  ratioBefore: number | null;
}

/** The bare one-row commit's table; the hand-written transaction writes the lean tables (bench/lean-statement.ts). */
const BARE_SCHEMA = 'CREATE TABLE bench_bare (n bigint)';
/** The hand-written transaction's consumer in the lean tables. */
const HAND_WRITTEN = 'baseline';

/** The floor of any durable commit: one row inserted in a transaction of its own (autocommit), prepared once. */
async function bareCommit(pool: pg.Pool, n: number): Promise<number> {
  const t = performance.now();
  await pool.query({ name: 'bench_bare', text: 'INSERT INTO bench_bare VALUES ($1)', values: [n] });
  return performance.now() - t;
}

interface LatencySeries {
  p50Ms: number;
  p99Ms: number;
  samples: number;
}
/** A 1-event checkpoint's commit latency against a bare one-row commit's. */
interface Latency {
  /** this tree's commit as the streaming run calls it */
  after: LatencySeries & { via: CommitVia };
  before: (LatencySeries & { via: CommitVia }) | null;
  bare: LatencySeries;
  /** after p99 over bare p99 */
  ratioP99: number;
  ratioP99Before: number | null;
}

async function handWrittenCommit(pool: pg.Pool, plan: CheckpointPlan): Promise<void> {
  const e = plan.events;
  const data = e.map((x) => x.data as { market: string; price: string; size: string });
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(
      `INSERT INTO lean_receipts SELECT $1, * FROM unnest($2::text[], $3::bytea[], $4::bigint[], $5::int[]) ON CONFLICT DO NOTHING`,
      [
        HAND_WRITTEN,
        e.map((x) => x.eventId),
        contentHashArray(e.map((x) => x.contentHash)),
        e.map((x) => x.position),
        e.map((x) => x.ordinal),
      ],
    );
    await client.query(
      `INSERT INTO lean_effects SELECT $1, id, rev, market, price, size, price * size
         FROM unnest($2::text[], $3::int[], $4::text[], $5::numeric[], $6::numeric[]) AS t(id, rev, market, price, size)
       ON CONFLICT (consumer_id, entity_id) DO UPDATE
          SET revision = EXCLUDED.revision, market = EXCLUDED.market, price = EXCLUDED.price, size = EXCLUDED.size, notional = EXCLUDED.notional`,
      [
        HAND_WRITTEN,
        e.map((x) => x.entityId),
        e.map((x) => x.revision),
        data.map((d) => d.market),
        data.map((d) => d.price),
        data.map((d) => d.size),
      ],
    );
    const res = await client.query(
      `UPDATE lean_checkpoint SET position = $2, token = $3, version = version + 1 WHERE consumer_id = $1`,
      [HAND_WRITTEN, plan.checkpoint.position, plan.checkpoint.token],
    );
    if (res.rowCount !== 1) throw new Error('baseline checkpoint row missing');
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
}

function summarise(latencies: number[], size: number): Series {
  const sorted = [...latencies].sort((a, b) => a - b);
  const total = latencies.reduce((a, b) => a + b, 0);
  const p50 = percentile(sorted, 50);
  return {
    eventsPerSecond: Math.round((size * latencies.length) / (total / 1000)),
    eventsPerSecondAtP50: Math.round(size / (p50 / 1000)),
    p50Ms: round(percentile(sorted, 50), 2),
    p99Ms: round(percentile(sorted, 99), 2),
    iterations: latencies.length,
  };
}

/** The share of a plan's events at or above the whale-alert threshold: what the outbox path is given. */
function whaleShare(plans: CheckpointPlan[]): number {
  const threshold = parseDecimal(WHALE_ALERT_MIN_NOTIONAL);
  let whales = 0;
  let events = 0;
  for (const plan of plans) {
    for (const event of plan.events) {
      events += 1;
      if (event.trade && compareDecimal(parseDecimal(notional(event.trade.price, event.trade.size)), threshold) >= 0)
        whales += 1;
    }
  }
  return events === 0 ? 0 : Math.round((whales / events) * 1000) / 1000;
}

/** commitCheckpoints where the tree has it (the streaming run's group commit), else commitCheckpoint. */
type CommitVia = 'commitCheckpoints' | 'commitCheckpoint';

/** A tree's commitCheckpoint on a scratch database of its own, migrated by that tree. */
interface Committer {
  target: Target;
  /** a checkpoint of `size` new events through `via` (default commitCheckpoint); resolves with its latency, ms */
  commit(size: number, via?: CommitVia): Promise<number>;
  /** how the tree's streaming run commits a checkpoint */
  streamingVia: CommitVia;
  plans: CheckpointPlan[];
}

async function committer(target: Target, pool: pg.Pool, consumerId: string): Promise<Committer> {
  const db = await importFrom<typeof Db>(target, 'db/index.ts');
  await db.migrate(pool);
  const lease = await db.acquireLease(pool, consumerId);
  let fence = { leaseEpoch: lease.leaseEpoch, version: lease.version };
  const nextPlan = freshCheckpoints(consumerId);
  const plans: CheckpointPlan[] = [];
  // A baseline from before group commit has commitCheckpoint only.
  const grouped = (db as { commitCheckpoints?: typeof db.commitCheckpoints }).commitCheckpoints;
  return {
    target,
    plans,
    streamingVia: grouped ? 'commitCheckpoints' : 'commitCheckpoint',
    async commit(size, via = 'commitCheckpoint') {
      // Plans are built before the clock starts: only the database work is measured.
      const plan = nextPlan(size, fence);
      if (plans.length < 50) plans.push(plan);
      const t = performance.now();
      const result =
        via === 'commitCheckpoints' ? (await grouped!(pool, [plan]))[0]! : await db.commitCheckpoint(pool, plan);
      const ms = performance.now() - t;
      if (result.kind !== 'committed') throw new Error(`bench commit did not commit: ${JSON.stringify(result)}`);
      fence = { leaseEpoch: fence.leaseEpoch, version: result.version };
      return ms;
    },
  };
}

async function withPool<T>(url: string, fn: (pool: pg.Pool) => Promise<T>): Promise<T> {
  const pool = createPool(url, { max: 2 });
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}

export async function runCommitBench(ctx: BenchContext): Promise<void> {
  const start = machineState();
  await withScratchDatabase('whalehunt_bench_commit', (url) =>
    withPool(url, async (pool) => {
      const ours = await committer(ctx.after, pool, 'bench');
      await createLeanTables(pool, [HAND_WRITTEN]);
      await pool.query(BARE_SCHEMA);
      const measure = async (before: Committer | null) => {
        // First, on a heap as small as a live consumer's: after the 10,000-event checkpoints below, a collection of
        // their garbage lands in some single-event commit and sets the p99.
        const latency = await measureLatency(pool, ours, before);
        const baselinePlan = freshCheckpoints(HAND_WRITTEN);
        const rows: Row[] = [];
        for (const size of SIZES) {
          const series = { after: [] as number[], before: [] as number[], hand: [] as number[] };
          for (let i = 0; i < WARMUP + (ITERATIONS[size] ?? DEFAULT_ITERATIONS); i++) {
            const base = baselinePlan(size, { leaseEpoch: 0, version: 0 });
            // Alternate who goes first, so neither always meets the other's checkpoint or autovacuum.
            const steps: [keyof typeof series, () => Promise<number>][] = [
              ['after', () => ours.commit(size)],
              ...(before
                ? [['before', () => before.commit(size)] as [keyof typeof series, () => Promise<number>]]
                : []),
              [
                'hand',
                async () => {
                  const t = performance.now();
                  await handWrittenCommit(pool, base);
                  return performance.now() - t;
                },
              ],
            ];
            for (const [key, step] of i % 2 === 0 ? steps : steps.reverse()) {
              const ms = await step();
              if (i >= WARMUP) series[key].push(ms);
            }
          }
          const ourSeries = summarise(series.after, size);
          const beforeSeries = before ? summarise(series.before, size) : null;
          const theirSeries = summarise(series.hand, size);
          const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
          const row: Row = {
            size,
            commitCheckpoint: ourSeries,
            before: beforeSeries,
            handWritten: theirSeries,
            ratio: ratio(ourSeries.eventsPerSecond, theirSeries.eventsPerSecond),
            ratioAtP50: ratio(ourSeries.eventsPerSecondAtP50, theirSeries.eventsPerSecondAtP50),
            ratioBefore: beforeSeries ? ratio(beforeSeries.eventsPerSecond, theirSeries.eventsPerSecond) : null,
          };
          rows.push(row);
          console.log(
            `size ${size}: ${ourSeries.eventsPerSecond} ev/s` +
              (beforeSeries ? ` (before ${beforeSeries.eventsPerSecond})` : '') +
              ` vs hand-written ${theirSeries.eventsPerSecond} ev/s (ratio ${row.ratio}, at p50 ${row.ratioAtP50})`,
          );
        }
        return { rows, latency };
      };
      const { rows, latency } = ctx.before
        ? await withScratchDatabase('whalehunt_bench_commit_before', (beforeUrl) =>
            withPool(beforeUrl, async (beforePool) => measure(await committer(ctx.before!, beforePool, 'bench'))),
          )
        : await measure(null);
      writeCommitResults(ctx, rows, latency, whaleShare(ours.plans), start);
    }),
  );
}

/**
 * 1-event checkpoints committed as each tree's streaming run commits them, and bare one-row commits on this
 * tree's pool, interleaved (the order rotating per sample).
 */
async function measureLatency(pool: pg.Pool, ours: Committer, before: Committer | null): Promise<Latency> {
  const series = { after: [] as number[], before: [] as number[], bare: [] as number[] };
  type Step = readonly [keyof typeof series, () => Promise<number>];
  const steps: Step[] = [
    ['after', () => ours.commit(1, ours.streamingVia)],
    ...(before ? [['before', () => before.commit(1, before.streamingVia)] as const] : []),
    ['bare', () => bareCommit(pool, series.bare.length)],
  ];
  for (let i = 0; i < LATENCY_WARMUP + LATENCY_SAMPLES; i++) {
    for (let k = 0; k < steps.length; k++) {
      const [key, step] = steps[(i + k) % steps.length]!;
      const ms = await step();
      if (i >= LATENCY_WARMUP) series[key].push(ms);
    }
  }
  const summary = (ms: number[]): LatencySeries => {
    const sorted = [...ms].sort((a, b) => a - b);
    return { p50Ms: round(percentile(sorted, 50), 3), p99Ms: round(percentile(sorted, 99), 3), samples: ms.length };
  };
  const bare = summary(series.bare);
  const after = { ...summary(series.after), via: ours.streamingVia };
  const beforeSeries = before ? { ...summary(series.before), via: before.streamingVia } : null;
  const latency: Latency = {
    after,
    before: beforeSeries,
    bare,
    ratioP99: round(after.p99Ms / bare.p99Ms, 2),
    ratioP99Before: beforeSeries ? round(beforeSeries.p99Ms / bare.p99Ms, 2) : null,
  };
  console.log(
    `1-event commit p50/p99 ${after.p50Ms}/${after.p99Ms} ms` +
      (beforeSeries ? ` (before ${beforeSeries.p50Ms}/${beforeSeries.p99Ms})` : '') +
      ` vs bare one-row commit ${bare.p50Ms}/${bare.p99Ms} ms: p99 ratio ${latency.ratioP99}`,
  );
  return latency;
}

function writeCommitResults(
  ctx: BenchContext,
  rows: Row[],
  latency: Latency,
  share: number,
  start: ReturnType<typeof machineState>,
): void {
  const end = machineState();
  const targets = { 'ratio@1000': 0.6, 'ratio@100': 0.5 };
  const trees = { after: ctx.after.commit, before: ctx.before?.commit ?? null };
  const json = { bench: 'commit', start, end, trees, whaleAlertShare: share, targets, rows, latency };
  writeResults('commit', json, [
    `# commit benchmark (${end.at})`,
    '',
    'commitCheckpoint (validate, fence, read receipts+executions, decide, receipts/executions/revisions/volumes/outbox/binding/checkpoint writes)',
    'against a hand-written transaction of the same shape (dedup INSERT + effects UPSERT + checkpoint UPDATE), same database, interleaved',
    `(the order alternating per iteration). Every event is a new trade; measured whale-alert share ${(share * 100).toFixed(1)}%`,
    `(threshold ${WHALE_ALERT_MIN_NOTIONAL}). events/s = events / summed latency (ratio); the p50 ratio uses median latencies instead.`,
    `Targets: ratio >= 0.6 at 1,000, >= 0.5 at 100. Trees: after ${trees.after}` +
      (trees.before ? `, before ${trees.before} (its own scratch database, in the same interleaving).` : '.'),
    describeMachine(start, end),
    '',
    ...table(
      [
        'events/checkpoint',
        'commitCheckpoint ev/s',
        'p50 ms',
        'p99 ms',
        'before ev/s',
        'before p50 ms',
        'hand-written ev/s',
        'p50 ms',
        'p99 ms',
        'ratio',
        'ratio at p50',
        'ratio before',
      ],
      rows.map((r) => [
        r.size,
        r.commitCheckpoint.eventsPerSecond,
        r.commitCheckpoint.p50Ms,
        r.commitCheckpoint.p99Ms,
        r.before?.eventsPerSecond ?? '–',
        r.before?.p50Ms ?? '–',
        r.handWritten.eventsPerSecond,
        r.handWritten.p50Ms,
        r.handWritten.p99Ms,
        r.ratio,
        r.ratioAtP50,
        r.ratioBefore ?? '–',
      ]),
    ),
    '',
    '## commit p99 of a 1-event checkpoint vs a bare one-row commit',
    '',
    `${latency.bare.samples} samples each, interleaved (the order rotating), after ${LATENCY_WARMUP} unmeasured, before the sizes above: a`,
    "checkpoint of one new trade committed as each tree's streaming run commits it (the call below), and a bare",
    "commit (one prepared INSERT of one row in its own transaction, autocommit) on this tree's pool. The streaming run",
    "sends a checkpoint's ACK (one ws.send) as soon as its commit resolves: the commit is what the ACK waits on; the",
    'send itself is not measured here. Target: ratio of p99s <= 5.',
    '',
    ...table(
      ['series', 'tree', 'call', 'p50 ms', 'p99 ms', 'p99 / bare p99'],
      [
        ['checkpoint', 'after', latency.after.via, latency.after.p50Ms, latency.after.p99Ms, latency.ratioP99],
        ...(latency.before
          ? [
              [
                'checkpoint',
                'before',
                latency.before.via,
                latency.before.p50Ms,
                latency.before.p99Ms,
                latency.ratioP99Before ?? '–',
              ],
            ]
          : []),
        ['bare one-row commit', '–', 'INSERT', latency.bare.p50Ms, latency.bare.p99Ms, 1],
      ],
    ),
    '',
  ]);
}
