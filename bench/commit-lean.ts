// commitCheckpoint against the leanest correct commit of the same checkpoint (bench/lean-statement.ts, the anchor of
// issue 22's commit ratio) on the 10%-whale workload of bench/fixtures.ts, on the same scratch database,
// interleaved so both see the same machine. Also commitCheckpoints
// over runs of small checkpoints (group commit) against committing the same run one at a time. Writes
// bench/results/commit-lean.json and commit-lean.md.
import type pg from 'pg';
import { acquireLease, commitCheckpoint, commitCheckpoints, createPool, migrate } from '../db/index.js';
import { DEFAULT_ITERATIONS, ITERATIONS, WARMUP } from './commit.js';
import { freshCheckpoints } from './fixtures.js';
import { createLeanTables, leanCommit } from './lean-statement.js';
import type { CheckpointPlan } from '../protocol/types.js';
import {
  describeMachine,
  machineState,
  percentile,
  round,
  withScratchDatabase,
  writeResults,
  type MachineState,
} from './support.js';

/** The sizes the ratio is judged at; BENCH_LEAN_SIZES=100 narrows a run. */
const SIZES = (process.env.BENCH_LEAN_SIZES ?? '100,1000').split(',').map(Number);
/**
 * Commits per size and statement: several seconds of each, so that a checkpoint flush or an autovacuum pass landing
 * on a few of them moves the mean ratio little (40 at 1,000 events moved it by a tenth between two runs).
 * BENCH_LEAN_ITERATIONS shortens a validation run.
 */
const LEAN_ITERATIONS: Record<number, number> = { 100: 600, 1_000: 150 };
const iterations = (size: number) =>
  Number(process.env.BENCH_LEAN_ITERATIONS ?? LEAN_ITERATIONS[size] ?? ITERATIONS[size] ?? DEFAULT_ITERATIONS);
/** Group commit: runs of GROUP checkpoints of SMALL events each. */
const GROUP = 10;
const SMALL = 25;
const GROUP_RUNS = Number(process.env.BENCH_LEAN_GROUP_RUNS ?? 40);
const LEAN = 'lean';

/** The lean statement over the plan's events (the parameter arrays built inside the timing, as ours builds its). */
function leanCommitOf(pool: pg.Pool, plan: CheckpointPlan, version: number): Promise<number> {
  const e = plan.events;
  const data = e.map((x) => x.data as { market: string; price: string; size: string });
  return leanCommit(
    pool,
    LEAN,
    { position: plan.checkpoint.position, token: plan.checkpoint.token, version },
    {
      eventIds: e.map((x) => x.eventId),
      contentHashes: e.map((x) => x.contentHash),
      positions: e.map((x) => x.position),
      ordinals: e.map((x) => x.ordinal),
      entityIds: e.map((x) => x.entityId),
      revisions: e.map((x) => x.revision),
      markets: data.map((d) => d.market),
      prices: data.map((d) => d.price),
      sizes: data.map((d) => d.size),
    },
  );
}

const round2 = (n: number) => round(n, 2);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const p50 = (xs: number[]) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );

export interface CommitLeanRow {
  size: number;
  /** commitCheckpoint events/s over the lean statement's (mean latencies) */
  ratio: number;
  ratioAtP50: number;
  exactPathRatio: number;
}

export async function runCommitLeanBench(): Promise<void> {
  const start = machineState();
  await withScratchDatabase('whalehunt_bench_lean', async (url) => {
    const pool = createPool(url, { max: 2 });
    try {
      await migrate(pool);
      await createLeanTables(pool, [LEAN]);
      const lease = await acquireLease(pool, 'bench');
      let fence = { leaseEpoch: lease.leaseEpoch, version: lease.version };
      const ours = freshCheckpoints('bench');
      const theirs = freshCheckpoints(LEAN);
      let leanVersion = 0;
      // The table's ratios as numbers, for the summary: commitCheckpoint events/s over the lean statement's.
      const rows: CommitLeanRow[] = [];
      const lines = [
        'exact path = the read-decide-write transaction: what a checkpoint with a duplicate, a correction of an earlier entity or a quarantine takes.',
        '',
        '| events/checkpoint | commitCheckpoint ev/s | p50 ms | exact path ev/s | p50 ms | lean statement ev/s | p50 ms | ratio | ratio at p50 | exact path ratio |',
        '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ];
      for (const size of SIZES) {
        const a: number[] = [];
        const b: number[] = [];
        const c: number[] = [];
        for (let i = 0; i < WARMUP + iterations(size); i++) {
          const plan = ours(size, fence);
          const base = theirs(size, { leaseEpoch: 0, version: 0 });
          let t = performance.now();
          const result = await commitCheckpoint(pool, plan);
          const ourMs = performance.now() - t;
          if (result.kind !== 'committed') throw new Error(`bench commit did not commit: ${result.kind}`);
          fence = { leaseEpoch: fence.leaseEpoch, version: result.version };
          t = performance.now();
          leanVersion = await leanCommitOf(pool, base, leanVersion);
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
          ratio: round2(mean(b) / mean(a)),
          ratioAtP50: round2(p50(b) / p50(a)),
          exactPathRatio: round2(mean(b) / mean(c)),
        });
        lines.push(
          `| ${size} | ${Math.round((size * 1000) / mean(a))} | ${round2(p50(a))} | ${Math.round((size * 1000) / mean(c))} | ` +
            `${round2(p50(c))} | ${Math.round((size * 1000) / mean(b))} | ${round2(p50(b))} | ${round2(mean(b) / mean(a))} | ` +
            `${round2(p50(b) / p50(a))} | ${round2(mean(b) / mean(c))} |`,
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
        `| ${GROUP_RUNS} | ${Math.round((events * 1000) / mean(single))} | ${round2(p50(single))} | ` +
          `${Math.round((events * 1000) / mean(grouped))} | ${round2(p50(grouped))} | ${round2(mean(single) / mean(grouped))} |`,
        '',
      );
      writeLeanResults(rows, lines, start);
    } finally {
      await pool.end();
    }
  });
}

function writeLeanResults(rows: CommitLeanRow[], lines: string[], start: MachineState): void {
  const end = machineState();
  writeResults('commit-lean', { bench: 'commit-lean', start, end, rows, report: lines }, [
    `# commit-lean benchmark (${end.at})`,
    '',
    'commitCheckpoint against the leanest correct commit of the same checkpoint (bench/lean-statement.ts: one prepared,',
    'fenced statement in autocommit), on the same scratch database, interleaved; every event new, one in ten a whale',
    '(bench/fixtures.ts). ratio = lean mean latency / commitCheckpoint mean latency (events/s ours over lean).',
    describeMachine(start, end),
    '',
    ...lines,
  ]);
}
