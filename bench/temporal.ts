// Through Temporal against in-process: the stream bench's journal (BENCH_TRANSITIONS, default 100,000, a
// checkpoint every 1,000 batches) replayed from the floor to its cut by ONE consumer, either as consumerWorkflow
// (from_floor) on one worker process of the tree with the default settings, or in-process (a timed stream run:
// consumeStream alone in a process of its own), against the same reference server, the modes and trees
// alternating over BENCH_ROUNDS rounds (default 2). What Temporal costs a consumer is the ratio. Needs
// TEMPORAL_CLI. Writes bench/results/temporal.json and temporal.md.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { postgresCpu } from './proc-cpu.js';
import { SEED, probeHead, replayFrames, startSimulator, stopSimulator } from './simulator-process.js';
import { streamRun } from './stream.js';
import {
  ADMIN_DATABASE_URL,
  describeMachine,
  interleaved,
  machineState,
  median,
  round,
  table,
  writeResults,
  type BenchContext,
  type Target,
} from './support.js';
import { bundleWorkflows, replayThroughTemporal, startTemporal } from './temporal-env.js';

/**
 * About 250,000 events: long enough that start-up and JIT warm-up are a small part of a run, as in a replay of
 * months (at 20,000 transitions they were a third of the consumer's CPU).
 */
const TRANSITIONS = Number(process.env.BENCH_TRANSITIONS ?? 100_000);
const CHECKPOINT_EVERY = 1_000;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
/** The cut commit is polled for: 10 ms is well under 1% of a replay's wall time. */
const POLL_MS = 10;
const TIMEOUT_MS = 600_000;
/** Issue 12: through Temporal keeps at least this share of the in-process throughput. */
const TARGET_RATIO = 0.9;

/** One replay: its wall time and the CPU of the process that consumed (the worker, or the in-process run). */
interface Replay {
  wallMs: number;
  cpuMs: number;
}

export interface TemporalRow {
  target: Target['label'];
  commit: string;
  events: number;
  rounds: number;
  /** medians over the rounds */
  temporalEventsPerSecond: number;
  inProcessEventsPerSecond: number;
  /** through Temporal over in-process */
  ratio: number;
  /** the worker process's CPU (Temporal's SDK included) against the in-process run's, per event */
  workerCpuUsPerEvent: number;
  inProcessCpuUsPerEvent: number;
}

export async function runTemporalBench(ctx: BenchContext): Promise<void> {
  const env = await startTemporal('temporal');
  const dir = await mkdtemp(join(tmpdir(), 'whalehunt-bench-temporal-'));
  const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery: CHECKPOINT_EVERY, keepJournal: true });
  try {
    const start = machineState();
    const postgres = await postgresCpu(ADMIN_DATABASE_URL);
    const targets = ctx.before ? [ctx.after, ctx.before] : [ctx.after];
    const bundles = new Map<Target, string>();
    for (const target of targets) bundles.set(target, await bundleWorkflows(target, dir));
    const head = await probeHead(sim.url);
    // Counts the events, and (untimed) makes the server generate its journal before the timed replays.
    let events = 0;
    let checkpoints = 0;
    await replayFrames(sim.url, head, (text) => {
      if (text.includes('"type":"batch"')) events += (JSON.parse(text) as { events: unknown[] }).events.length;
      else if (text.includes('"type":"checkpoint"')) checkpoints += 1;
    });
    const runs = new Map(targets.map((t) => [t, { temporal: [] as Replay[], inProcess: [] as Replay[] }]));
    for (let r = 0; r < ROUNDS; r++) {
      for (const target of interleaved(ctx, r)) {
        const modes = ['temporal', 'inProcess'] as const;
        for (const mode of r % 2 === 0 ? modes : [...modes].reverse()) {
          let measured: Replay;
          if (mode === 'temporal') {
            const replay = await replayThroughTemporal({
              env,
              target,
              bundlePath: bundles.get(target)!,
              sim,
              head,
              workers: 1,
              consumers: 1,
              pollMs: POLL_MS,
              timeoutMs: TIMEOUT_MS,
            });
            measured = { wallMs: replay.wallMs, cpuMs: replay.workerCpuMs };
          } else {
            const run = await streamRun(target, sim, head, 'timed', postgres);
            if (run.events !== events) throw new Error(`in-process run committed ${run.events} of ${events} events`);
            measured = { wallMs: run.wallMs, cpuMs: run.cpuMs };
          }
          runs.get(target)![mode].push(measured);
          console.log(`round ${r} ${target.label} ${mode}: ${Math.round(events / (measured.wallMs / 1000))} ev/s`);
        }
      }
    }
    const rows: TemporalRow[] = targets.map((target) => {
      const { temporal, inProcess } = runs.get(target)!;
      const perSecond = (replays: Replay[]) => median(replays.map((x) => events / (x.wallMs / 1000)));
      const cpuUs = (replays: Replay[]) => round(median(replays.map((x) => (x.cpuMs * 1000) / events)));
      const temporalEventsPerSecond = perSecond(temporal);
      const inProcessEventsPerSecond = perSecond(inProcess);
      return {
        target: target.label,
        commit: target.commit,
        events,
        rounds: ROUNDS,
        temporalEventsPerSecond: Math.round(temporalEventsPerSecond),
        inProcessEventsPerSecond: Math.round(inProcessEventsPerSecond),
        ratio: round(temporalEventsPerSecond / inProcessEventsPerSecond, 2),
        workerCpuUsPerEvent: cpuUs(temporal),
        inProcessCpuUsPerEvent: cpuUs(inProcess),
      };
    });
    const end = machineState();
    const eventsPerCheckpoint = Math.round(events / checkpoints);
    const json = {
      bench: 'temporal',
      seed: SEED,
      transitions: TRANSITIONS,
      checkpointEvery: CHECKPOINT_EVERY,
      eventsPerCheckpoint,
      targetRatio: TARGET_RATIO,
      start,
      end,
      rows,
    };
    writeResults('temporal', json, [
      `# temporal benchmark (${end.at})`,
      '',
      `One consumer replays a seeded journal (seed ${SEED}, ${TRANSITIONS} transitions, ${events} events, a checkpoint`,
      `every ${CHECKPOINT_EVERY} batches: ${eventsPerCheckpoint} events per checkpoint) from the floor to its cut, through`,
      "Temporal (consumerWorkflow, from_floor, on one worker process of the tree with the default settings, the tree's",
      'own workflow bundle, a fresh scratch database; wall time from starting the workflow to the cut commit seen,',
      `polled every ${POLL_MS} ms, the worker started and migrated before) and in-process (a stream bench timed run:`,
      'consumeStream in a process of its own, the database created and migrated before). Same reference server, the',
      `trees and modes alternating; medians of ${ROUNDS} rounds. ratio = through Temporal / in-process events/s`,
      `(target >= ${TARGET_RATIO}). cpu = the worker process (Temporal SDK included) or the in-process run, per event.`,
      'The Temporal dev server, Postgres and the reference server share the machine.',
      describeMachine(start, end),
      '',
      ...table(
        [
          'tree',
          'commit',
          'events',
          'through Temporal ev/s',
          'in-process ev/s',
          'ratio',
          'worker cpu µs/event',
          'in-process cpu µs/event',
        ],
        rows.map((r) => [
          r.target,
          r.commit,
          r.events,
          r.temporalEventsPerSecond,
          r.inProcessEventsPerSecond,
          r.ratio,
          r.workerCpuUsPerEvent,
          r.inProcessCpuUsPerEvent,
        ]),
      ),
      '',
    ]);
  } finally {
    await stopSimulator(sim);
    await env.teardown();
    await rm(dir, { recursive: true, force: true });
  }
}
