// commitCheckpoint against the leanest correct commit of the same checkpoint (issue 12): ONE prepared, fenced
// statement — `UPDATE checkpoint … RETURNING` feeding `unnest … ON CONFLICT` inserts of receipts and effects — in
// autocommit, on the same scratch database, interleaved so both see the same machine. Also commitCheckpoints
// over runs of small checkpoints (group commit) against committing the same run one at a time. Writes
// bench/results/commit-lean.json and commit-lean.md.
import { randomBytes } from 'node:crypto';
import { availableParallelism, loadavg } from 'node:os';
import type pg from 'pg';
import { acquireLease, commitCheckpoint, commitCheckpoints, createPool, migrate } from '../db/index.js';
import { freshCheckpoints } from './fixtures.js';
import type { CheckpointPlan } from '../protocol/types.js';
import { percentile, withScratchDatabase, writeResults } from './support.js';

const SIZES = (process.env.BENCH_SIZES ?? '100,1000').split(',').map(Number);
const ITERATIONS: Record<number, number> = { 100: 150, 1_000: 40 };
const WARMUP = 3;
/** Group commit: runs of GROUP checkpoints of SMALL events each. */
const GROUP = 10;
const SMALL = 25;
const GROUP_RUNS = 40;

const LEAN_SCHEMA = `
  CREATE TABLE lean_receipts (consumer_id text, event_id text, content_hash text, position bigint, ordinal int,
                              PRIMARY KEY (consumer_id, event_id));
  CREATE TABLE lean_effects (consumer_id text, entity_id text, revision int, market text, price numeric, size numeric,
                             notional numeric, PRIMARY KEY (consumer_id, entity_id));
  CREATE TABLE lean_checkpoint (consumer_id text PRIMARY KEY, position bigint, token text, version int);
  INSERT INTO lean_checkpoint VALUES ('lean', 0, '', 0);`;

const LEAN_SQL = `
WITH cp AS (
  UPDATE lean_checkpoint SET position = $1, token = $2, version = version + 1
   WHERE consumer_id = 'lean' AND version = $3 RETURNING version
),
r AS (
  INSERT INTO lean_receipts SELECT 'lean', * FROM unnest($4::text[], $5::text[], $6::bigint[], $7::int[])
   WHERE EXISTS (SELECT 1 FROM cp) ON CONFLICT DO NOTHING
),
e AS (
  INSERT INTO lean_effects SELECT 'lean', id, rev, market, price, size, price * size
    FROM unnest($8::text[], $9::int[], $10::text[], $11::numeric[], $12::numeric[]) AS t(id, rev, market, price, size)
   WHERE EXISTS (SELECT 1 FROM cp)
  ON CONFLICT (consumer_id, entity_id) DO UPDATE
     SET revision = EXCLUDED.revision, market = EXCLUDED.market, price = EXCLUDED.price, size = EXCLUDED.size,
         notional = EXCLUDED.notional
)
SELECT version FROM cp`;

async function leanCommit(pool: pg.Pool, plan: CheckpointPlan, version: number): Promise<number> {
  const e = plan.events;
  const data = e.map((x) => x.data as { market: string; price: string; size: string });
  const res = await pool.query<{ version: number }>({
    name: 'lean_commit',
    text: LEAN_SQL,
    values: [
      plan.checkpoint.position,
      plan.checkpoint.token,
      version,
      e.map((x) => x.eventId),
      e.map((x) => x.contentHash),
      e.map((x) => x.position),
      e.map((x) => x.ordinal),
      e.map((x) => x.entityId),
      e.map((x) => x.revision),
      data.map((d) => d.market),
      data.map((d) => d.price),
      data.map((d) => d.size),
    ],
  });
  if (res.rows.length !== 1) throw new Error('lean commit fenced');
  return res.rows[0]!.version;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const p50 = (xs: number[]) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );
const round = (n: number) => Math.round(n * 100) / 100;

export async function runCommitLeanBench(): Promise<void> {
  await withScratchDatabase(`whalehunt_bench_${randomBytes(4).toString('hex')}`, async (url) => {
    const pool = createPool(url, { max: 2 });
    try {
      await migrate(pool);
      await pool.query(LEAN_SCHEMA);
      const lease = await acquireLease(pool, 'bench');
      let fence = { leaseEpoch: lease.leaseEpoch, version: lease.version };
      const ours = freshCheckpoints('bench');
      const theirs = freshCheckpoints('lean');
      let leanVersion = 0;
      // The table's ratios as numbers, for the summary: commitCheckpoint events/s over the lean statement's.
      const rows: { size: number; ratio: number; ratioAtP50: number; exactPathRatio: number }[] = [];
      const lines = [
        `Machine load average at the start: ${loadavg()
          .map((l) => l.toFixed(1))
          .join(' ')} on ${availableParallelism()} cores.`,
        '',
        'exact path = the read-decide-write transaction: what a checkpoint with a duplicate, a correction of an earlier entity or a quarantine takes.',
        '',
        '| events/checkpoint | commitCheckpoint ev/s | p50 ms | exact path ev/s | p50 ms | lean statement ev/s | p50 ms | ratio | ratio at p50 | exact path ratio |',
        '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ];
      for (const size of SIZES) {
        const a: number[] = [];
        const b: number[] = [];
        const c: number[] = [];
        for (let i = 0; i < WARMUP + (ITERATIONS[size] ?? 20); i++) {
          const plan = ours(size, fence);
          const base = theirs(size, { leaseEpoch: 0, version: 0 });
          let t = performance.now();
          const result = await commitCheckpoint(pool, plan);
          const ourMs = performance.now() - t;
          if (result.kind !== 'committed') throw new Error(`bench commit did not commit: ${result.kind}`);
          fence = { leaseEpoch: fence.leaseEpoch, version: result.version };
          t = performance.now();
          leanVersion = await leanCommit(pool, base, leanVersion);
          const theirMs = performance.now() - t;
          // A test cut point inside the transaction makes commitCheckpoint take the exact path.
          const exact = ours(size, fence);
          t = performance.now();
          const exactResult = await commitCheckpoint(pool, exact, () => undefined);
          const exactMs = performance.now() - t;
          if (exactResult.kind !== 'committed') throw new Error(`bench commit did not commit: ${exactResult.kind}`);
          fence = { leaseEpoch: fence.leaseEpoch, version: exactResult.version };
          if (i >= WARMUP) {
            a.push(ourMs);
            b.push(theirMs);
            c.push(exactMs);
          }
        }
        rows.push({
          size,
          ratio: round(mean(b) / mean(a)),
          ratioAtP50: round(p50(b) / p50(a)),
          exactPathRatio: round(mean(b) / mean(c)),
        });
        lines.push(
          `| ${size} | ${Math.round((size * 1000) / mean(a))} | ${round(p50(a))} | ${Math.round((size * 1000) / mean(c))} | ` +
            `${round(p50(c))} | ${Math.round((size * 1000) / mean(b))} | ${round(p50(b))} | ${round(mean(b) / mean(a))} | ` +
            `${round(p50(b) / p50(a))} | ${round(mean(b) / mean(c))} |`,
        );
      }

      // Group commit: the same runs of small checkpoints, one at a time vs one commitCheckpoints call per run.
      const single: number[] = [];
      const grouped: number[] = [];
      for (let run = 0; run < WARMUP + GROUP_RUNS; run++) {
        let t = performance.now();
        for (let i = 0; i < GROUP; i++) {
          const result = await commitCheckpoint(pool, ours(SMALL, fence));
          if (result.kind !== 'committed') throw new Error(`bench commit did not commit: ${result.kind}`);
          fence = { leaseEpoch: fence.leaseEpoch, version: result.version };
        }
        const singleMs = performance.now() - t;
        const plans = Array.from({ length: GROUP }, () => ours(SMALL, fence));
        t = performance.now();
        const outcomes = await commitCheckpoints(pool, plans);
        const groupMs = performance.now() - t;
        const last = outcomes.at(-1)!;
        if (outcomes.length !== GROUP || last.kind !== 'committed') throw new Error('group commit did not commit');
        fence = { leaseEpoch: fence.leaseEpoch, version: last.version };
        if (run >= WARMUP) {
          single.push(singleMs);
          grouped.push(groupMs);
        }
      }
      const events = GROUP * SMALL;
      lines.push(
        '',
        `| runs of ${GROUP} checkpoints x ${SMALL} events | one at a time ev/s | p50 ms | commitCheckpoints ev/s | p50 ms | speed-up |`,
        '| ---: | ---: | ---: | ---: | ---: | ---: |',
        `| ${GROUP_RUNS} | ${Math.round((events * 1000) / mean(single))} | ${round(p50(single))} | ` +
          `${Math.round((events * 1000) / mean(grouped))} | ${round(p50(grouped))} | ${round(mean(single) / mean(grouped))} |`,
        '',
        `Machine load average at the end: ${loadavg()
          .map((l) => l.toFixed(1))
          .join(' ')}.`,
      );
      const json = { bench: 'commit-lean', date: new Date().toISOString(), rows, report: lines };
      writeResults('commit-lean', json, [
        `# commit-lean benchmark (${new Date().toISOString()}, Node ${process.version})`,
        '',
        ...lines,
      ]);
    } finally {
      await pool.end();
    }
  });
}
