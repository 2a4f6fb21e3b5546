// End-to-end streaming throughput: consumeStream (ws → codec → Session → StagingBuffer → commitCheckpoint → ACK)
// replaying a seeded journal from the floor to its cut, one row per checkpointEvery. The reference server runs
// in a child process, and so does every measured run (bench/stream-run.ts), each with a scratch database of its
// own and the worker's default staging limits: its CPU time and peak RSS are the client's alone. With a
// baseline, the baseline tree's consumeStream and commitCheckpoint run in alternating rounds with this tree's
// against the same server, after one untimed replay that makes the server generate its journal. Postgres's and
// the reference server's CPU over each timed run are read from /proc by this process, at the edges of the run's
// timed window. The live heap is measured in a separate, untimed pass (forced GCs), never inside a timed run.
// Writes bench/results/stream.json and stream.md.
import {
  backendsCpuMs,
  describePostgresCpu,
  HAS_PROC,
  postgresCpu,
  processCpuMs,
  type PostgresCpu,
  type PostgresCpuSample,
} from './proc-cpu.js';
import {
  API_KEY,
  SEED,
  SUBSCRIPTION,
  probeHead,
  replayFrames,
  startSimulator,
  stopSimulator,
  type Simulator,
} from './simulator-process.js';
import type { StreamRunResult } from './stream-run.js';
import {
  ADMIN_DATABASE_URL,
  TIMED_END,
  TIMED_START,
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

/**
 * About 250,000 events: long enough that start-up and JIT warm-up are a small part of a run, as in a replay of
 * months (at 20,000 transitions they were a third of the consumer's CPU).
 */
export const TRANSITIONS = Number(process.env.BENCH_TRANSITIONS ?? 100_000);
/** BENCH_CHECKPOINT_EVERY=100 narrows a run while investigating. */
const CHECKPOINT_EVERY = (process.env.BENCH_CHECKPOINT_EVERY ?? '10,100,1000').split(',').map(Number);
/**
 * Timed runs per consumer and row. Three: on these machines two runs of the same tree half an hour apart differed
 * by a tenth in their ratio to the minimal consumer, and a median of two is their mean.
 */
export const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

export interface StreamRow {
  checkpointEvery: number;
  target: ConsumerLabel;
  /** '–' for the minimal consumer */
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
  /** the whole Postgres server's CPU per event over the timed window; null without a local /proc */
  postgresCpuUsPerEvent: number | null;
  /** of which the run's own backends (its scratch database's) */
  postgresBackendsCpuUsPerEvent: number | null;
  /** the reference server's CPU per event over the timed window */
  serverCpuUsPerEvent: number | null;
  /** the consumer's process + its database's backends + the reference server, per event */
  machineCpuUsPerEvent: number | null;
  commit50Ms: number;
  commit99Ms: number;
  peakRssMb: number;
  /** from the separate heap pass; null for the minimal consumer (not measured) */
  liveHeapMb: number | null;
  // The collector's figures (medians over the timed runs) are absent from results written before they were measured.
  /** young-generation bytes the scavenges copied per event (kept young or promoted) */
  scavengedBytesPerEvent?: number;
  /** of which promoted to the old generation */
  promotedBytesPerEvent?: number;
  /** the main thread's garbage-collection pauses (scavenges and full collections) per event */
  gcPauseUsPerEvent?: number;
}

/** A stream run with the CPU other processes spent over its timed window, ms (null where it cannot be read). */
export interface MeasuredStreamRun extends StreamRunResult {
  postgresCpuMs: number | null;
  postgresBackendsCpuMs: number | null;
  serverCpuMs: number | null;
}

let runSerial = 0;

/** What a stream run measures: a tree's consumeStream (bench/stream-run.ts) or the minimal consumer. */
export type Consumer = Target | 'minimal';
export type ConsumerLabel = Target['label'] | 'minimal';
export const labelOf = (consumer: Consumer): ConsumerLabel => (consumer === 'minimal' ? 'minimal' : consumer.label);

/**
 * One run of `consumer` from the floor to `cut` in a process of its own (the minimal consumer's is always timed),
 * with the CPU that Postgres and the reference server spent over its timed window.
 */
export async function streamRun(
  consumer: Consumer,
  sim: Simulator,
  cut: number,
  mode: 'timed' | 'heap',
  postgres: PostgresCpu,
  /** the minimal consumer only: this many at once in its process */
  consumers = 1,
): Promise<MeasuredStreamRun> {
  runSerial += 1;
  let database = '';
  const samples: { postgres: PostgresCpuSample | null; serverMs: number | null }[] = [];
  const sample = () =>
    samples.push({
      postgres: postgres.available ? postgres.sample(database) : null,
      serverMs: HAS_PROC ? processCpuMs(sim.process.pid!) : null,
    });
  const common = {
    BENCH_URL: sim.url,
    BENCH_CUT: String(cut),
    // A consumer of its own per run: the server keeps no state of one run for the next.
    BENCH_CONSUMER: `bench-stream-${process.pid}-${runSerial}`,
  };
  const [script, env] =
    consumer === 'minimal'
      ? [
          'minimal-run.ts',
          { ...common, BENCH_API_KEY: API_KEY, BENCH_SUBSCRIPTION: SUBSCRIPTION, BENCH_CONSUMERS: String(consumers) },
        ]
      : ['stream-run.ts', { ...common, BENCH_TARGET_ROOT: consumer.root, BENCH_RUN_MODE: mode }];
  const what = `stream run (${labelOf(consumer)}, ${mode})`;
  const result = await runBenchProcess<StreamRunResult>(script, what, env, (line) => {
    if (line.startsWith(TIMED_START)) {
      database = line.slice(TIMED_START.length).trim();
      sample();
    } else if (line === TIMED_END) sample();
  });
  const [start, end] = samples;
  if (!start || !end) throw new Error(`${what} did not mark its timed window`);
  const delta = (a: number | null | undefined, b: number | null | undefined) => (a == null || b == null ? null : b - a);
  return {
    ...result,
    postgresCpuMs: delta(start.postgres?.serverMs, end.postgres?.serverMs),
    postgresBackendsCpuMs: backendsCpuMs(start.postgres, end.postgres),
    serverCpuMs: delta(start.serverMs, end.serverMs),
  };
}

/**
 * The machine's CPU of a run, ms: the consumer's process, its database's backends and the reference server
 * (null where /proc cannot say).
 */
export function machineCpuMs(run: MeasuredStreamRun): number | null {
  return run.postgresBackendsCpuMs === null || run.serverCpuMs === null
    ? null
    : run.cpuMs + run.postgresBackendsCpuMs + run.serverCpuMs;
}

/** µs per event of a CPU time in ms, the median over runs; null when any run could not read it. */
function usPerEvent(runs: MeasuredStreamRun[], ms: (run: MeasuredStreamRun) => number | null): number | null {
  const values = runs.map(ms);
  if (values.some((v) => v === null)) return null;
  return round(median(values.map((v, i) => (v! * 1000) / runs[i]!.events)));
}

async function rowsFor(ctx: BenchContext, checkpointEvery: number, postgres: PostgresCpu): Promise<StreamRow[]> {
  const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery, keepJournal: true });
  try {
    const cut = await probeHead(sim.url);
    // Untimed: the server generates its journal as it is first read (its CPU 28 µs/event then, 8 on the next read).
    await replayFrames(sim.url, cut);
    const targets = ctx.before ? [ctx.after, ctx.before] : [ctx.after];
    const consumers: Consumer[] = [...targets, 'minimal'];
    const timed = new Map<Consumer, MeasuredStreamRun[]>(consumers.map((c) => [c, []]));
    for (let r = 0; r < ROUNDS; r++) {
      for (const consumer of [...interleaved(ctx, r), 'minimal' as const]) {
        timed.get(consumer)!.push(await streamRun(consumer, sim, cut, 'timed', postgres));
      }
    }
    const heap = new Map<Target, StreamRunResult>();
    for (const target of targets) heap.set(target, await streamRun(target, sim, cut, 'heap', postgres));
    return consumers.map((consumer) => {
      const runs = timed.get(consumer)!;
      const commits = runs.flatMap((r) => r.commitMs).sort((a, b) => a - b);
      const events = runs[0]!.events;
      const label = labelOf(consumer);
      if (runs.some((r) => r.events !== events)) throw new Error(`runs disagree on the event count (${label})`);
      return {
        checkpointEvery,
        target: label,
        commit: consumer === 'minimal' ? '–' : consumer.commit,
        runs: runs.length,
        events,
        checkpoints: runs[0]!.checkpoints,
        wallMs: Math.round(median(runs.map((r) => r.wallMs))),
        eventsPerSecond: Math.round(median(runs.map((r) => events / (r.wallMs / 1000)))),
        checkpointsPerSecond: round(median(runs.map((r) => r.checkpoints / (r.wallMs / 1000)))),
        cpuUsPerEvent: round(median(runs.map((r) => (r.cpuMs * 1000) / events))),
        postgresCpuUsPerEvent: usPerEvent(runs, (r) => r.postgresCpuMs),
        postgresBackendsCpuUsPerEvent: usPerEvent(runs, (r) => r.postgresBackendsCpuMs),
        serverCpuUsPerEvent: usPerEvent(runs, (r) => r.serverCpuMs),
        machineCpuUsPerEvent: usPerEvent(runs, machineCpuMs),
        commit50Ms: round(percentile(commits, 50), 2),
        commit99Ms: round(percentile(commits, 99), 2),
        peakRssMb: round(median(runs.map((r) => r.maxRssMb))),
        liveHeapMb: consumer === 'minimal' ? null : round(heap.get(consumer)!.liveHeapMb ?? 0),
        scavengedBytesPerEvent: Math.round(median(runs.map((r) => r.gc.scavengedBytes / events))),
        promotedBytesPerEvent: Math.round(median(runs.map((r) => r.gc.promotedBytes / events))),
        gcPauseUsPerEvent: round(median(runs.map((r) => ((r.gc.scavengeMs + r.gc.fullCollectionMs) * 1000) / events))),
      };
    });
  } finally {
    await stopSimulator(sim);
  }
}

export async function runStreamBench(ctx: BenchContext): Promise<void> {
  const start = machineState();
  const postgres = await postgresCpu(ADMIN_DATABASE_URL);
  const rows: StreamRow[] = [];
  for (const every of CHECKPOINT_EVERY) {
    for (const row of await rowsFor(ctx, every, postgres)) {
      rows.push(row);
      console.log(
        `checkpointEvery ${every} ${row.target}: ${row.eventsPerSecond} ev/s, ${row.cpuUsPerEvent} µs cpu/event, ` +
          `postgres ${row.postgresCpuUsPerEvent ?? '–'} µs/event (its backends ${row.postgresBackendsCpuUsPerEvent ?? '–'}), ` +
          `server ${row.serverCpuUsPerEvent ?? '–'} µs/event, ` +
          `commit p50 ${row.commit50Ms} ms p99 ${row.commit99Ms} ms, peak RSS ${row.peakRssMb} MB`,
      );
    }
  }
  const end = machineState();
  const postgresCpuNote = postgres.available
    ? { available: true, postmasterPid: postgres.postmasterPid }
    : { available: false, reason: postgres.reason };
  const json = {
    bench: 'stream',
    seed: SEED,
    transitions: TRANSITIONS,
    rounds: ROUNDS,
    postgresCpu: postgresCpuNote,
    start,
    end,
    rows,
  };
  writeResults('stream', json, [
    `# stream benchmark (${end.at})`,
    '',
    `consumeStream replays a seeded journal (seed ${SEED}, ${TRANSITIONS} transitions, all events matched) from the floor to`,
    'its cut: from_floor (which returns after its first commit), then resume until the cut checkpoint commits. The reference',
    "server and every run are separate processes; each run gets a fresh scratch database and the worker's default staging",
    `limits. Medians of ${ROUNDS} timed runs per consumer, the trees alternating; commit percentiles over all of them. cpu =`,
    "the run's user+system time per event; peak RSS = the run process's getrusage maximum (start-up included); live heap =",
    'the largest heapUsed after a full GC forced every 250 ms, in a separate untimed run. One untimed replay per server',
    'comes first (it generates the journal as it is first read). postgres cpu = the whole Postgres server (postmaster,',
    'its live and exited children) over the timed window, from /proc: any other client of the server counts too; run',
    "backends = the live backends of the run's own database alone; server cpu = the reference server process; machine",
    'cpu = client + run backends + server. minimal = the minimal consumer (bench/minimal-consumer.ts) on the same server',
    "and journal, measured in each round after the trees: the anchor the ratios divide by. From V8's GC profiler over",
    'the timed window: scavenged = the young-generation bytes the scavenges copied (kept young or promoted) per event,',
    "promoted = of which moved to the old generation, gc pause = the main thread's collection pauses per event (the",
    "collector's parallel work on V8's helper threads is in client cpu, not here).",
    describePostgresCpu(postgres),
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
        'postgres cpu µs/event',
        'run backends µs/event',
        'server cpu µs/event',
        'machine cpu µs/event',
        'commit p50 ms',
        'commit p99 ms',
        'peak RSS MB',
        'live heap MB',
        'scavenged B/event',
        'promoted B/event',
        'gc pause µs/event',
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
        r.postgresCpuUsPerEvent ?? '–',
        r.postgresBackendsCpuUsPerEvent ?? '–',
        r.serverCpuUsPerEvent ?? '–',
        r.machineCpuUsPerEvent ?? '–',
        r.commit50Ms,
        r.commit99Ms,
        r.peakRssMb,
        r.liveHeapMb ?? '–',
        r.scavengedBytesPerEvent ?? '–',
        r.promotedBytesPerEvent ?? '–',
        r.gcPauseUsPerEvent ?? '–',
      ]),
    ),
    '',
  ]);
}
