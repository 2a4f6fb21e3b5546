// Commit throughput: commitCheckpoint against a minimal hand-written transaction of the same shape (dedup
// INSERT + effects UPSERT + checkpoint UPDATE), on the same scratch database, in the same run, interleaved so
// both see the same machine. Writes bench/results/commit.json and commit.md.
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { acquireLease, commitCheckpoint, createPool, migrate } from '../db/index.js';
import { makePlan, trade } from './fixtures.js';
import type { CheckpointPlan, StagedEvent } from '../protocol/types.js';
import { percentile, withScratchDatabase } from './support.js';

/** Checkpoint sizes; BENCH_SIZES=100,1000 narrows a run while investigating. */
const SIZES = (process.env.BENCH_SIZES ?? '1,100,1000,10000').split(',').map(Number);
/** Enough iterations for a stable p50 and a meaningful p99 at small sizes, bounded time at large ones. */
const ITERATIONS: Record<number, number> = { 1: 400, 100: 150, 1_000: 40, 10_000: 8 };
const DEFAULT_ITERATIONS = 20;
const WARMUP = 3;
const MARKETS = 20;

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
  commitCheckpoint: Series;
  handWritten: Series;
  /** commitCheckpoint events/s divided by the hand-written one's (mean-based). */
  ratio: number;
  /** the same ratio from median latencies */
  ratioAtP50: number;
}

const BASELINE_SCHEMA = `
  CREATE TABLE bench_receipts (consumer_id text, event_id text, content_hash text, position bigint, ordinal int,
                               PRIMARY KEY (consumer_id, event_id));
  CREATE TABLE bench_effects (consumer_id text, entity_id text, revision int, market text, price numeric, size numeric,
                              notional numeric, PRIMARY KEY (consumer_id, entity_id));
  CREATE TABLE bench_checkpoint (consumer_id text PRIMARY KEY, position bigint, token text, version int);
  INSERT INTO bench_checkpoint VALUES ('baseline', 0, '', 0);`;

async function handWrittenCommit(pool: pg.Pool, plan: CheckpointPlan): Promise<void> {
  const e = plan.events;
  const data = e.map((x) => x.data as { market: string; price: string; size: string });
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(
      `INSERT INTO bench_receipts SELECT 'baseline', * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[]) ON CONFLICT DO NOTHING`,
      [e.map((x) => x.eventId), e.map((x) => x.contentHash), e.map((x) => x.position), e.map((x) => x.ordinal)],
    );
    await client.query(
      `INSERT INTO bench_effects SELECT 'baseline', id, rev, market, price, size, price * size
         FROM unnest($1::text[], $2::int[], $3::text[], $4::numeric[], $5::numeric[]) AS t(id, rev, market, price, size)
       ON CONFLICT (consumer_id, entity_id) DO UPDATE
          SET revision = EXCLUDED.revision, market = EXCLUDED.market, price = EXCLUDED.price, size = EXCLUDED.size, notional = EXCLUDED.notional`,
      [
        e.map((x) => x.entityId),
        e.map((x) => x.revision),
        data.map((d) => d.market),
        data.map((d) => d.price),
        data.map((d) => d.size),
      ],
    );
    const res = await client.query(
      `UPDATE bench_checkpoint SET position = $1, token = $2, version = version + 1 WHERE consumer_id = 'baseline'`,
      [plan.checkpoint.position, plan.checkpoint.token],
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
  const round = (n: number) => Math.round(n * 100) / 100;
  const p50 = percentile(sorted, 50);
  return {
    eventsPerSecond: Math.round((size * latencies.length) / (total / 1000)),
    eventsPerSecondAtP50: Math.round(size / (p50 / 1000)),
    p50Ms: round(percentile(sorted, 50)),
    p99Ms: round(percentile(sorted, 99)),
    iterations: latencies.length,
  };
}

/** A stream of fresh checkpoints: every event new, a realistic spread over markets, ~10% whale alerts. */
function checkpointFactory(consumerId: string) {
  let position = 0;
  let serial = 0;
  return (size: number, fence: { leaseEpoch: number; version: number }): CheckpointPlan => {
    const events: StagedEvent[] = [];
    position += 1;
    for (let ordinal = 1; ordinal <= size; ordinal++) {
      serial += 1;
      events.push(
        trade(
          position,
          `ent-${serial}`,
          { market: `m-${serial % MARKETS}`, price: `0.${(serial % 97) + 1}`, size: `${(serial % 500) + 1}.25` },
          { ordinal, eventId: `ev-${serial}` },
        ),
      );
    }
    return makePlan(consumerId, {
      fence,
      position,
      events,
      whaleAlertMinNotional: '450',
      startMode: position === 1 ? 'from_floor' : 'resume',
    });
  };
}

export async function runCommitBench(): Promise<void> {
  await withScratchDatabase(`whalehunt_bench_${randomBytes(4).toString('hex')}`, async (url) => {
    const pool = createPool(url, { max: 2 });
    try {
      await migrate(pool);
      await pool.query(BASELINE_SCHEMA);
      const consumerId = 'bench';
      const lease = await acquireLease(pool, consumerId);
      let fence = { leaseEpoch: lease.leaseEpoch, version: lease.version };
      const nextPlan = checkpointFactory(consumerId);
      const baselinePlan = checkpointFactory('baseline');

      const rows: Row[] = [];
      for (const size of SIZES) {
        const ours: number[] = [];
        const theirs: number[] = [];
        for (let i = 0; i < WARMUP + (ITERATIONS[size] ?? DEFAULT_ITERATIONS); i++) {
          // Plans are built before the clock starts: only the database work is measured.
          const plan = nextPlan(size, fence);
          const base = baselinePlan(size, { leaseEpoch: 0, version: 0 });
          let t = performance.now();
          const result = await commitCheckpoint(pool, plan);
          const ourMs = performance.now() - t;
          if (result.kind !== 'committed') throw new Error(`bench commit did not commit: ${JSON.stringify(result)}`);
          fence = { leaseEpoch: fence.leaseEpoch, version: result.version };
          t = performance.now();
          await handWrittenCommit(pool, base);
          const theirMs = performance.now() - t;
          if (i >= WARMUP) {
            ours.push(ourMs);
            theirs.push(theirMs);
          }
        }
        const ourSeries = summarise(ours, size);
        const theirSeries = summarise(theirs, size);
        const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
        const row: Row = {
          size,
          commitCheckpoint: ourSeries,
          handWritten: theirSeries,
          ratio: ratio(ourSeries.eventsPerSecond, theirSeries.eventsPerSecond),
          ratioAtP50: ratio(ourSeries.eventsPerSecondAtP50, theirSeries.eventsPerSecondAtP50),
        };
        rows.push(row);
        console.log(
          `size ${size}: ${ourSeries.eventsPerSecond} ev/s vs ${theirSeries.eventsPerSecond} ev/s (ratio ${row.ratio}, at p50 ${row.ratioAtP50})`,
        );
      }
      writeResults(rows);
    } finally {
      await pool.end();
    }
  });
}

function writeResults(rows: Row[]): void {
  const dir = join(dirname(fileURLToPath(import.meta.url)), 'results');
  mkdirSync(dir, { recursive: true });
  const meta = {
    bench: 'commit',
    at: new Date().toISOString(),
    node: process.version,
    targets: { 'ratio@1000': 0.6, 'ratio@100': 0.5 },
  };
  writeFileSync(join(dir, 'commit.json'), `${JSON.stringify({ ...meta, rows }, null, 2)}\n`);
  const lines = [
    `# commit benchmark (${meta.at}, Node ${meta.node})`,
    '',
    'commitCheckpoint (validate, fence, read receipts+executions, decide, receipts/executions/revisions/volumes/outbox/binding/checkpoint writes)',
    'against a hand-written transaction of the same shape (dedup INSERT + effects UPSERT + checkpoint UPDATE), same database, interleaved.',
    'Every event is a new trade, ~10% above the whale-alert threshold. events/s = events / summed latency (ratio);',
    'the p50 ratio uses median latencies instead. Targets: ratio >= 0.6 at 1,000, >= 0.5 at 100.',
    `Machine load average at the end of the run: ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')} on ${availableParallelism()} cores.`,
    '',
    '| events/checkpoint | commitCheckpoint ev/s | p50 ms | p99 ms | hand-written ev/s | p50 ms | p99 ms | ratio | ratio at p50 |',
    '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map(
      (r) =>
        `| ${r.size} | ${r.commitCheckpoint.eventsPerSecond} | ${r.commitCheckpoint.p50Ms} | ${r.commitCheckpoint.p99Ms} | ` +
        `${r.handWritten.eventsPerSecond} | ${r.handWritten.p50Ms} | ${r.handWritten.p99Ms} | ${r.ratio} | ${r.ratioAtP50} |`,
    ),
    '',
  ];
  writeFileSync(join(dir, 'commit.md'), lines.join('\n'));
  console.log(lines.join('\n'));
}
