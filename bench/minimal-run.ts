// One run of the minimal consumer (bench/minimal-consumer.ts), in a process of its own so that its CPU time and
// peak RSS are its alone: BENCH_CONSUMERS of them (default 1) at once each replay the reference server at
// BENCH_URL from the floor to BENCH_CUT into the lean tables of a fresh scratch database. The same contract as a
// stream bench run (bench/stream-run.ts): TIMED_START and TIMED_END on stdout around the timed window, one JSON
// line (a StreamRunResult) last. Its environment names the key and subscription, so that the process loads
// nothing of the consumer's pipeline.
import pg from 'pg';
import { startGcStats } from './gc-stats.js';
import { createLeanTables } from './lean-statement.js';
import { consumeMinimal } from './minimal-consumer.js';
import type { StreamRunResult } from './stream-run.js';
import { endTimedWindow, TIMED_START, withScratchDatabase } from './support.js';

const consumerIds = Array.from(
  { length: Number(process.env.BENCH_CONSUMERS ?? 1) },
  (_, i) => `${process.env.BENCH_CONSUMER!}-${i}`,
);

const result = await withScratchDatabase('whalehunt_bench_minimal', async (dbUrl): Promise<StreamRunResult> => {
  // As many connections as a stream run (2) per consumer, up to the worker's default pool (DATABASE_POOL_SIZE 10).
  const pool = new pg.Pool({ connectionString: dbUrl, max: Math.min(2 * consumerIds.length, 10) });
  // pool.end() resolves before its clients have closed: the scratch database's DROP … FORCE may still meet one.
  pool.on('error', () => undefined);
  try {
    await createLeanTables(pool, consumerIds);
    process.stdout.write(`${TIMED_START} ${new URL(dbUrl).pathname.slice(1)}\n`);
    const stopGcStats = startGcStats();
    const cpu = process.cpuUsage();
    const t = performance.now();
    const outcomes = await Promise.all(
      consumerIds.map((consumerId, i) =>
        consumeMinimal({
          url: process.env.BENCH_URL!,
          apiKey: process.env.BENCH_API_KEY!,
          pool,
          consumerId,
          subscriptionId: `${process.env.BENCH_SUBSCRIPTION!}-${i}`,
          cut: Number(process.env.BENCH_CUT),
        }),
      ),
    );
    const endedAt = performance.now();
    const used = process.cpuUsage(cpu);
    const gc = stopGcStats();
    await endTimedWindow();
    const firstCommits = outcomes.map((o) => o.firstCommit!);
    const events = outcomes.reduce((sum, o) => sum + o.events, 0);
    return {
      events,
      checkpoints: outcomes.reduce((sum, o) => sum + o.checkpoints, 0),
      commitMs: outcomes.flatMap((o) => o.commitMs),
      wallMs: endedAt - t,
      steady: {
        wallMs: endedAt - Math.max(...firstCommits.map((c) => c.at)),
        events: events - firstCommits.reduce((sum, c) => sum + c.events, 0),
      },
      cpuMs: (used.user + used.system) / 1000,
      maxRssMb: process.resourceUsage().maxRSS / 1024,
      liveHeapMb: null,
      gc,
    };
  } finally {
    await pool.end();
  }
});
process.stdout.write(`${JSON.stringify(result)}\n`);
