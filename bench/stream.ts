// End-to-end streaming throughput: consumeStream (ws → codec → Session → StagingBuffer → commitCheckpoint → ACK)
// replaying a seeded journal from the floor to its cut, one row per checkpointEvery. The reference server runs
// in a child process, and so does every measured run (bench/stream-run.ts), each with a scratch database of its
// own and the worker's default staging limits: its CPU time and peak RSS are the client's alone. With a
// baseline, the baseline tree's consumeStream and commitCheckpoint run in alternating rounds with this tree's
// against the same server. The live heap is measured in a separate, untimed pass (forced GCs), never inside a
// timed run. Writes bench/results/stream.json and stream.md.
import { SEED, probeHead, startSimulator, stopSimulator } from './simulator-process.js';
import type { StreamRunResult } from './stream-run.js';
import {
  describeMachine,
  interleaved,
  machineState,
  median,
  percentile,
  round,
  table,
  runBenchProcess,
  writeResults,
  type BenchContext,
  type Target,
} from './support.js';

const TRANSITIONS = Number(process.env.BENCH_TRANSITIONS ?? 20_000);
/** BENCH_CHECKPOINT_EVERY=100 narrows a run while investigating. */
const CHECKPOINT_EVERY = (process.env.BENCH_CHECKPOINT_EVERY ?? '10,100,1000').split(',').map(Number);
/** Timed runs per tree and row. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);

export interface StreamRow {
  checkpointEvery: number;
  target: Target['label'];
  commit: string;
  runs: number;
  events: number;
  checkpoints: number;
  /** medians over the timed runs */
  wallMs: number;
  eventsPerSecond: number;
  checkpointsPerSecond: number;
  /** client process CPU (user + system) per event, start-up excluded */
  cpuUsPerEvent: number;
  commit50Ms: number;
  commit99Ms: number;
  peakRssMb: number;
  /** from the separate heap pass */
  liveHeapMb: number;
}

let runSerial = 0;

function streamRun(target: Target, url: string, cut: number, mode: 'timed' | 'heap'): Promise<StreamRunResult> {
  runSerial += 1;
  return runBenchProcess<StreamRunResult>('stream-run.ts', `stream run (${target.label}, ${mode})`, {
    BENCH_TARGET_ROOT: target.root,
    BENCH_URL: url,
    BENCH_CUT: String(cut),
    // A consumer of its own per run: the server keeps no state of one run for the next.
    BENCH_CONSUMER: `bench-stream-${process.pid}-${runSerial}`,
    BENCH_RUN_MODE: mode,
  });
}

async function rowsFor(ctx: BenchContext, checkpointEvery: number): Promise<StreamRow[]> {
  const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery });
  try {
    const cut = await probeHead(sim.url);
    const targets = ctx.before ? [ctx.after, ctx.before] : [ctx.after];
    const timed = new Map<Target, StreamRunResult[]>(targets.map((t) => [t, []]));
    for (let r = 0; r < ROUNDS; r++) {
      for (const target of interleaved(ctx, r)) timed.get(target)!.push(await streamRun(target, sim.url, cut, 'timed'));
    }
    const heap = new Map<Target, StreamRunResult>();
    for (const target of targets) heap.set(target, await streamRun(target, sim.url, cut, 'heap'));
    return targets.map((target) => {
      const runs = timed.get(target)!;
      const commits = runs.flatMap((r) => r.commitMs).sort((a, b) => a - b);
      const events = runs[0]!.events;
      if (runs.some((r) => r.events !== events)) throw new Error(`runs disagree on the event count (${target.label})`);
      return {
        checkpointEvery,
        target: target.label,
        commit: target.commit,
        runs: runs.length,
        events,
        checkpoints: runs[0]!.checkpoints,
        wallMs: Math.round(median(runs.map((r) => r.wallMs))),
        eventsPerSecond: Math.round(median(runs.map((r) => events / (r.wallMs / 1000)))),
        checkpointsPerSecond: round(median(runs.map((r) => r.checkpoints / (r.wallMs / 1000)))),
        cpuUsPerEvent: round(median(runs.map((r) => (r.cpuMs * 1000) / events))),
        commit50Ms: round(percentile(commits, 50), 2),
        commit99Ms: round(percentile(commits, 99), 2),
        peakRssMb: round(median(runs.map((r) => r.maxRssMb))),
        liveHeapMb: round(heap.get(target)!.liveHeapMb ?? 0),
      };
    });
  } finally {
    await stopSimulator(sim);
  }
}

export async function runStreamBench(ctx: BenchContext): Promise<void> {
  const start = machineState();
  const rows: StreamRow[] = [];
  for (const every of CHECKPOINT_EVERY) {
    for (const row of await rowsFor(ctx, every)) {
      rows.push(row);
      console.log(
        `checkpointEvery ${every} ${row.target}: ${row.eventsPerSecond} ev/s, ${row.cpuUsPerEvent} µs cpu/event, ` +
          `commit p50 ${row.commit50Ms} ms p99 ${row.commit99Ms} ms, peak RSS ${row.peakRssMb} MB`,
      );
    }
  }
  const end = machineState();
  writeResults('stream', { bench: 'stream', seed: SEED, transitions: TRANSITIONS, rounds: ROUNDS, start, end, rows }, [
    `# stream benchmark (${end.at})`,
    '',
    `consumeStream replays a seeded journal (seed ${SEED}, ${TRANSITIONS} transitions, all events matched) from the floor to`,
    'its cut: from_floor (which returns after its first commit), then resume until the cut checkpoint commits. The reference',
    "server and every run are separate processes; each run gets a fresh scratch database and the worker's default staging",
    `limits. Medians of ${ROUNDS} timed runs per tree, the trees alternating; commit percentiles over all of them. cpu =`,
    "the run's user+system time per event; peak RSS = the run process's getrusage maximum (start-up included); live heap =",
    'the largest heapUsed after a full GC forced every 250 ms, in a separate untimed run.',
    describeMachine(start, end),
    '',
    ...table(
      [
        'checkpointEvery',
        'tree',
        'commit',
        'events',
        'checkpoints',
        'wall ms',
        'events/s',
        'checkpoints/s',
        'client cpu µs/event',
        'commit p50 ms',
        'commit p99 ms',
        'peak RSS MB',
        'live heap MB',
      ],
      rows.map((r) => [
        r.checkpointEvery,
        r.target,
        r.commit,
        r.events,
        r.checkpoints,
        r.wallMs,
        r.eventsPerSecond,
        r.checkpointsPerSecond,
        r.cpuUsPerEvent,
        r.commit50Ms,
        r.commit99Ms,
        r.peakRssMb,
        r.liveHeapMb,
      ]),
    ),
    '',
  ]);
}
