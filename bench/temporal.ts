// Through Temporal against in-process and against the minimal consumer: the stream bench's journal
// (BENCH_TRANSITIONS, default 100,000) with a checkpoint every 1,000 and every 10 batches, replayed from the floor
// to its cut by ONE consumer, either as consumerWorkflow (from_floor) on one worker process of the tree with the
// default settings, or in-process (a timed stream run: consumeStream alone in a process of its own), against the
// same reference server, the modes and trees alternating over BENCH_ROUNDS rounds (default 3), and the minimal
// consumer (bench/minimal-consumer.ts) once per round. What Temporal costs a consumer is the first ratio; how far
// the whole pipeline is from the least a durable consumer must do, the second; the machine's CPU per event (from
// /proc) says where it goes. Needs TEMPORAL_CLI. Writes bench/results/temporal.json and temporal.md.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { describePostgresCpu, postgresCpu, type PostgresCpu } from './proc-cpu.js';
import { SEED, countJournal, probeHead, startSimulator, stopSimulator } from './simulator-process.js';
import { machineCpuMs, ROUNDS, streamRun, TRANSITIONS, type ConsumerLabel, type MeasuredStreamRun } from './stream.js';
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
import {
  bundleWorkflows,
  COMMIT_POLL_MS,
  machineCpuOfReplay,
  replayThroughTemporal,
  startTemporal,
} from './temporal-env.js';

/** Checkpoint sizes in journal transitions: the ratio to the minimal consumer is judged at both. */
const CHECKPOINT_EVERY = (process.env.BENCH_TEMPORAL_CHECKPOINT_EVERY ?? '1000,10').split(',').map(Number);
const TIMEOUT_MS = 600_000;
/** Issue 12: through Temporal keeps at least this share of the in-process throughput. */
const TARGET_RATIO = 0.9;

/** One replay: its wall time, the CPU of the process that consumed, and the machine's (null where unread). */
interface Replay {
  wallMs: number;
  cpuMs: number;
  machineCpuMs: number | null;
  /** where the machine's CPU went besides the consumer's process, ms (null where unread) */
  parts: MachineCpuParts;
}

/** The machine's CPU besides the consumer's process: what each ratio's remainder is made of (null where unread). */
interface MachineCpuParts {
  postgres: number | null;
  referenceServer: number | null;
  /** through Temporal only */
  temporalServer: number | null;
}

export interface TemporalRow {
  checkpointEvery: number;
  target: ConsumerLabel;
  /** '–' for the minimal consumer */
  commit: string;
  events: number;
  rounds: number;
  /** medians over the rounds; the minimal consumer has no Temporal figures (null) */
  temporalEventsPerSecond: number | null;
  inProcessEventsPerSecond: number;
  /** through Temporal over in-process */
  ratio: number | null;
  /** through Temporal over the minimal consumer of the same round */
  ratioToMinimal: number | null;
  /** the worker process's CPU (Temporal's SDK included) against the in-process run's, per event */
  workerCpuUsPerEvent: number | null;
  inProcessCpuUsPerEvent: number;
  /**
   * The machine's CPU per event: through Temporal, worker + its database's backends + reference server + Temporal
   * server; for the minimal consumer, its process + backends + reference server
   */
  machineCpuUsPerEvent: number | null;
  /** the machine's CPU per event besides the consumer's process (medians; null where unread or not run) */
  machineCpuPartsUsPerEvent: MachineCpuParts;
}

async function rowsFor(
  ctx: BenchContext,
  env: TestWorkflowEnvironment,
  bundles: Map<Target, string>,
  checkpointEvery: number,
  postgres: PostgresCpu,
): Promise<{ rows: TemporalRow[]; eventsPerCheckpoint: number }> {
  const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery, keepJournal: true });
  try {
    const targets = ctx.before ? [ctx.after, ctx.before] : [ctx.after];
    const head = await probeHead(sim.url);
    // Counts the events, and (untimed) makes the server generate its journal before the timed replays.
    const { events, checkpoints } = await countJournal(sim.url, head);
    const runs = new Map(targets.map((t) => [t, { temporal: [] as Replay[], inProcess: [] as Replay[] }]));
    const minimal: Replay[] = [];
    const measured = (run: MeasuredStreamRun): Replay => {
      if (run.events !== events) throw new Error(`in-process run committed ${run.events} of ${events} events`);
      return {
        wallMs: run.wallMs,
        cpuMs: run.cpuMs,
        machineCpuMs: machineCpuMs(run),
        parts: { postgres: run.postgresBackendsCpuMs, referenceServer: run.serverCpuMs, temporalServer: null },
      };
    };
    for (let r = 0; r < ROUNDS; r++) {
      for (const target of interleaved(ctx, r)) {
        const modes = ['temporal', 'inProcess'] as const;
        for (const mode of r % 2 === 0 ? modes : [...modes].reverse()) {
          let replay: Replay;
          if (mode === 'temporal') {
            const through = await replayThroughTemporal({
              env,
              target,
              bundlePath: bundles.get(target)!,
              sim,
              head,
              workers: 1,
              consumers: 1,
              pollMs: COMMIT_POLL_MS,
              timeoutMs: TIMEOUT_MS,
              postgres,
            });
            replay = {
              wallMs: through.wallMs,
              cpuMs: through.workerCpuMs,
              machineCpuMs: machineCpuOfReplay(through),
              parts: {
                postgres: through.postgresBackendsCpuMs,
                referenceServer: through.serverCpuMs,
                temporalServer: through.temporalServerCpuMs,
              },
            };
          } else replay = measured(await streamRun(target, sim, head, 'timed', postgres));
          runs.get(target)![mode].push(replay);
          console.log(`round ${r} ${target.label} ${mode}: ${Math.round(events / (replay.wallMs / 1000))} ev/s`);
        }
      }
      minimal.push(measured(await streamRun('minimal', sim, head, 'timed', postgres)));
      console.log(`round ${r} minimal: ${Math.round(events / (minimal.at(-1)!.wallMs / 1000))} ev/s`);
    }
    const perSecond = (replays: Replay[]) => median(replays.map((x) => events / (x.wallMs / 1000)));
    const cpuUs = (replays: Replay[]) => round(median(replays.map((x) => (x.cpuMs * 1000) / events)));
    const usPerEvent = (values: (number | null)[]) =>
      values.some((v) => v === null) ? null : round(median(values.map((v) => (v! * 1000) / events)));
    const machineUs = (replays: Replay[]) => usPerEvent(replays.map((x) => x.machineCpuMs));
    const partsUs = (replays: Replay[]): MachineCpuParts => ({
      postgres: usPerEvent(replays.map((x) => x.parts.postgres)),
      referenceServer: usPerEvent(replays.map((x) => x.parts.referenceServer)),
      temporalServer: usPerEvent(replays.map((x) => x.parts.temporalServer)),
    });
    const minimalEventsPerSecond = perSecond(minimal);
    const rows: TemporalRow[] = targets.map((target) => {
      const { temporal, inProcess } = runs.get(target)!;
      const temporalEventsPerSecond = perSecond(temporal);
      const inProcessEventsPerSecond = perSecond(inProcess);
      return {
        checkpointEvery,
        target: target.label,
        commit: target.commit,
        events,
        rounds: ROUNDS,
        temporalEventsPerSecond: Math.round(temporalEventsPerSecond),
        inProcessEventsPerSecond: Math.round(inProcessEventsPerSecond),
        ratio: round(temporalEventsPerSecond / inProcessEventsPerSecond, 2),
        ratioToMinimal: round(temporalEventsPerSecond / minimalEventsPerSecond, 2),
        workerCpuUsPerEvent: cpuUs(temporal),
        inProcessCpuUsPerEvent: cpuUs(inProcess),
        machineCpuUsPerEvent: machineUs(temporal),
        machineCpuPartsUsPerEvent: partsUs(temporal),
      };
    });
    rows.push({
      checkpointEvery,
      target: 'minimal',
      commit: '–',
      events,
      rounds: ROUNDS,
      temporalEventsPerSecond: null,
      inProcessEventsPerSecond: Math.round(minimalEventsPerSecond),
      ratio: null,
      ratioToMinimal: null,
      workerCpuUsPerEvent: null,
      inProcessCpuUsPerEvent: cpuUs(minimal),
      machineCpuUsPerEvent: machineUs(minimal),
      machineCpuPartsUsPerEvent: partsUs(minimal),
    });
    return { rows, eventsPerCheckpoint: Math.round(events / checkpoints) };
  } finally {
    await stopSimulator(sim);
  }
}

export async function runTemporalBench(ctx: BenchContext): Promise<void> {
  const env = await startTemporal('temporal');
  const dir = await mkdtemp(join(tmpdir(), 'whalehunt-bench-temporal-'));
  try {
    const start = machineState();
    const postgres = await postgresCpu(ADMIN_DATABASE_URL);
    const targets = ctx.before ? [ctx.after, ctx.before] : [ctx.after];
    const bundles = new Map<Target, string>();
    for (const target of targets) bundles.set(target, await bundleWorkflows(target, dir));
    const rows: TemporalRow[] = [];
    const eventsPerCheckpoint: Record<number, number> = {};
    for (const every of CHECKPOINT_EVERY) {
      const measured = await rowsFor(ctx, env, bundles, every, postgres);
      rows.push(...measured.rows);
      eventsPerCheckpoint[every] = measured.eventsPerCheckpoint;
    }
    const end = machineState();
    const json = {
      bench: 'temporal',
      seed: SEED,
      transitions: TRANSITIONS,
      eventsPerCheckpoint,
      targetRatio: TARGET_RATIO,
      postgresCpu: describePostgresCpu(postgres),
      start,
      end,
      rows,
    };
    const sizes = CHECKPOINT_EVERY.map((every) => `${every} (${eventsPerCheckpoint[every]} events)`).join(', ');
    writeResults('temporal', json, [
      `# temporal benchmark (${end.at})`,
      '',
      `One consumer replays a seeded journal (seed ${SEED}, ${TRANSITIONS} transitions, ${rows[0]!.events} events, a checkpoint`,
      `every N batches, N = ${sizes}) from the floor to its cut, through`,
      "Temporal (consumerWorkflow, from_floor, on one worker process of the tree with the default settings, the tree's",
      'own workflow bundle, a fresh scratch database; wall time from starting the workflow to the cut commit seen,',
      `polled every ${COMMIT_POLL_MS} ms, the worker started and migrated before), in-process (a stream bench timed run:`,
      'consumeStream in a process of its own, the database created and migrated before), and by the minimal consumer',
      '(bench/minimal-consumer.ts, in-process by nature). Same reference server, the trees and modes alternating, the',
      `minimal consumer last in each round; medians of ${ROUNDS} rounds. ratio = through Temporal / in-process events/s`,
      `(target >= ${TARGET_RATIO}); vs minimal = through Temporal / the minimal consumer's events/s. cpu = the worker`,
      'process (Temporal SDK included) or the in-process run, per event. machine cpu = through Temporal, the worker +',
      "the replay database's backends (the bench's 2 polling connections included) + the reference server + the",
      "Temporal dev server; for the minimal consumer, its process + its database's backends + the reference server.",
      'postgres / ref server / temporal server = those parts of machine cpu, per event.',
      describePostgresCpu(postgres),
      describeMachine(start, end),
      '',
      ...table(
        [
          'checkpointEvery',
          'tree',
          'commit',
          'events',
          'through Temporal ev/s',
          'in-process ev/s',
          'ratio',
          'vs minimal',
          'worker cpu µs/event',
          'in-process cpu µs/event',
          'machine cpu µs/event',
          'postgres µs/event',
          'ref server µs/event',
          'temporal server µs/event',
        ],
        rows.map((r) => [
          r.checkpointEvery,
          r.target,
          r.commit,
          r.events,
          r.temporalEventsPerSecond ?? '–',
          r.inProcessEventsPerSecond,
          r.ratio ?? '–',
          r.ratioToMinimal ?? '–',
          r.workerCpuUsPerEvent ?? '–',
          r.inProcessCpuUsPerEvent,
          r.machineCpuUsPerEvent ?? '–',
          r.machineCpuPartsUsPerEvent.postgres ?? '–',
          r.machineCpuPartsUsPerEvent.referenceServer ?? '–',
          r.machineCpuPartsUsPerEvent.temporalServer ?? '–',
        ]),
      ),
      '',
    ]);
  } finally {
    await env.teardown();
    await rm(dir, { recursive: true, force: true });
  }
}
