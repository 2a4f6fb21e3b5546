// Client CPU per event, without a database or a socket: the frames of one seeded from_floor replay, captured
// once from the reference server, go through decodeServerFrame, Session.receive (validation, staging, content
// hashes, plans) and decideCommit (over the executions earlier plans wrote, with a whale-alert threshold) of
// each measured tree.
// Every round runs each tree in a fresh process of its own (bench/cpu-run.ts), the trees alternating: two trees'
// modules in one process slow each other down (shared call sites turn polymorphic), which skewed an earlier
// in-process version of this bench. Garbage collection stays inside the timed passes: it is part of the cost.
// Writes bench/results/cpu.json and cpu.md.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Pass } from './cpu-run.js';
import { WHALE_ALERT_MIN_NOTIONAL } from './fixtures.js';
import { captureFrames, probeHead, SEED, startSimulator, stopSimulator } from './simulator-process.js';
import {
  describeMachine,
  interleaved,
  machineState,
  median,
  round,
  table,
  runBenchProcess,
  writeResults,
  type BenchContext,
  type Target,
} from './support.js';

const TRANSITIONS = Number(process.env.BENCH_TRANSITIONS ?? 20_000);
const CHECKPOINT_EVERY = 100;
/** Processes per tree, the trees alternating; each reports the median of its timed passes. */
const ROUNDS = Number(process.env.BENCH_CPU_ROUNDS ?? 5);

function cpuRun(target: Target, framesFile: string, events: number): Promise<Pass> {
  return runBenchProcess<Pass>('cpu-run.ts', `cpu run (${target.label})`, {
    BENCH_TARGET_ROOT: target.root,
    BENCH_FRAMES_FILE: framesFile,
    BENCH_EVENTS: String(events),
  });
}

export interface CpuRow {
  target: Target['label'];
  commit: string;
  decodeUs: number;
  stageUs: number;
  decideUs: number;
  totalUs: number;
  rounds: number;
}

export async function runCpuBench(ctx: BenchContext): Promise<void> {
  const start = machineState();
  const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery: CHECKPOINT_EVERY });
  let frames: string[];
  try {
    frames = await captureFrames(sim.url, await probeHead(sim.url));
  } finally {
    await stopSimulator(sim);
  }
  const events = frames.reduce(
    (n, text) => n + (text.includes('"type":"batch"') ? (JSON.parse(text) as { events: unknown[] }).events.length : 0),
    0,
  );
  const targets = ctx.before ? [ctx.after, ctx.before] : [ctx.after];
  const passes = new Map<Target, Pass[]>(targets.map((t) => [t, []]));
  const dir = await mkdtemp(join(tmpdir(), 'whalehunt-bench-cpu-'));
  try {
    const framesFile = join(dir, 'frames.json');
    await writeFile(framesFile, JSON.stringify(frames));
    for (let r = 0; r < ROUNDS; r++) {
      for (const target of interleaved(ctx, r)) passes.get(target)!.push(await cpuRun(target, framesFile, events));
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const alertCounts = new Set(targets.map((t) => passes.get(t)![0]!.alerts));
  if (alertCounts.size !== 1)
    throw new Error(`the trees disagree on the whale alerts: ${[...alertCounts].join(' vs ')}`);

  const rows: CpuRow[] = targets.map((target) => {
    const p = passes.get(target)!;
    const med = (pick: (x: Pass) => number) => round(median(p.map(pick)), 2);
    return {
      target: target.label,
      commit: target.commit,
      decodeUs: med((x) => x.decodeUs),
      stageUs: med((x) => x.stageUs),
      decideUs: med((x) => x.decideUs),
      totalUs: med((x) => x.totalUs),
      rounds: p.length,
    };
  });
  const end = machineState();
  const meta = { bench: 'cpu', seed: SEED, transitions: TRANSITIONS, frames: frames.length, events, start, end };
  writeResults('cpu', { ...meta, alerts: [...alertCounts][0], rows }, [
    `# client CPU per event (${end.at})`,
    '',
    `${events} events in ${frames.length} captured frames (seed ${SEED}, ${TRANSITIONS} transitions, a checkpoint every`,
    `${CHECKPOINT_EVERY} batches, the worker's default staging limits) through decodeServerFrame, Session.receive and`,
    `decideCommit (each plan over the executions the previous ones wrote, quarantine terminal, whale alerts at ${WHALE_ALERT_MIN_NOTIONAL}: ${[...alertCounts][0]} alerts). Median of ${ROUNDS}`,
    'rounds, each tree in a fresh process per round (a warm-up pass, then the median of 3), the trees alternating;',
    'frames are fed one at a time, as the streaming activity feeds them; garbage collection is inside the timed passes.',
    describeMachine(start, end),
    '',
    ...table(
      ['tree', 'commit', 'decode µs/event', 'session+staging µs/event', 'decide µs/event', 'total µs/event'],
      rows.map((r) => [r.target, r.commit, r.decodeUs, r.stageUs, r.decideUs, r.totalUs]),
    ),
    '',
  ]);
}
