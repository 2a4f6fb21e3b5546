// Scale: N consumers (default 1, 10, 50) replaying the same seeded journal from the floor to its cut through
// Temporal, on one worker process and on two (`worker/main.ts` as operators run it, the worker's defaults apart
// from a bundle built once), against one reference server in a child process and a scratch database per
// configuration. Reports throughput with start-up excluded (the events committed once every consumer has made its
// first commit, over the time from then to the last cut commit) beside N minimal consumers measured the same way,
// the workers' CPU per event, and the speed-up over one consumer: where it stops scaling. This tree only (no
// baseline). Needs TEMPORAL_CLI (scripts/ensure-temporal-cli.sh). Writes bench/results/scale.json
// and scale.md.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { postgresCpu } from './proc-cpu.js';
import { countJournal, probeHead, startSimulator, stopSimulator } from './simulator-process.js';
import { streamRun } from './stream.js';
import {
  ADMIN_DATABASE_URL,
  describeMachine,
  machineState,
  round,
  table,
  writeResults,
  type BenchContext,
} from './support.js';
import { bundleWorkflows, COMMIT_POLL_MS, replayThroughTemporal, startTemporal } from './temporal-env.js';

const CONSUMERS = (process.env.BENCH_SCALE_CONSUMERS ?? '1,10,50').split(',').map(Number);
const WORKERS = (process.env.BENCH_SCALE_WORKERS ?? '1,2').split(',').map(Number);
/**
 * About 50,000 events per consumer: one consumer replays for seconds after its start-up, not a fraction of one
 * (at 1,000 transitions the 0.85 s of start-up was most of the run).
 */
const TRANSITIONS = Number(process.env.BENCH_SCALE_TRANSITIONS ?? 20_000);
const CHECKPOINT_EVERY = 100;
const DONE_TIMEOUT_MS = Number(process.env.BENCH_SCALE_TIMEOUT_MS ?? 1_800_000);

interface ScaleRow {
  workers: number;
  consumers: number;
  eventsPerConsumer: number;
  /** from starting the workflows to the last cut commit */
  wallMs: number;
  /** of which start-up: until the last consumer's first commit was seen */
  startUpMs: number;
  /** events committed after start-up over the time after it: the throughput */
  eventsPerSecond: number;
  /** the minimal consumer × N (consumers), start-up excluded the same way */
  minimalEventsPerSecond: number;
  ratioToMinimal: number;
  /** eventsPerSecond over the same worker count's 1-consumer figure */
  speedup: number;
  /** user+system CPU of all worker processes (start-up included) per event */
  workerCpuUsPerEvent: number;
}

export async function runScaleBench(ctx: BenchContext): Promise<void> {
  const env = await startTemporal('scale');
  const start = machineState();
  const dir = await mkdtemp(join(tmpdir(), 'whalehunt-bench-scale-'));
  const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery: CHECKPOINT_EVERY, keepJournal: true });
  try {
    const bundlePath = await bundleWorkflows(ctx.after, dir);
    const postgres = await postgresCpu(ADMIN_DATABASE_URL);
    const head = await probeHead(sim.url);
    const { events: eventsPerConsumer, eventsAt } = await countJournal(sim.url, head);
    const minimal = new Map<number, number>();
    for (const consumers of CONSUMERS) {
      const run = await streamRun('minimal', sim, head, 'timed', postgres, consumers);
      minimal.set(consumers, run.steady!.events / (run.steady!.wallMs / 1000));
      console.log(`minimal x ${consumers}: ${Math.round(minimal.get(consumers)!)} ev/s`);
    }
    const rows: ScaleRow[] = [];
    for (const workers of WORKERS) {
      let single: number | null = null;
      for (const consumers of CONSUMERS) {
        const replay = await replayThroughTemporal({
          env,
          target: ctx.after,
          bundlePath,
          sim,
          head,
          workers,
          consumers,
          pollMs: COMMIT_POLL_MS,
          timeoutMs: DONE_TIMEOUT_MS,
          eventsAt,
        });
        const steady = replay.steady!;
        const eventsPerSecond = steady.events / (steady.wallMs / 1000);
        single ??= eventsPerSecond / consumers;
        const minimalEventsPerSecond = minimal.get(consumers)!;
        const row: ScaleRow = {
          workers,
          consumers,
          eventsPerConsumer,
          wallMs: Math.round(replay.wallMs),
          startUpMs: Math.round(replay.wallMs - steady.wallMs),
          eventsPerSecond: Math.round(eventsPerSecond),
          minimalEventsPerSecond: Math.round(minimalEventsPerSecond),
          ratioToMinimal: round(eventsPerSecond / minimalEventsPerSecond, 2),
          speedup: round(eventsPerSecond / single, 2),
          workerCpuUsPerEvent: round((replay.workerCpuMs * 1000) / (eventsPerConsumer * consumers)),
        };
        rows.push(row);
        console.log(
          `${workers} worker(s), ${consumers} consumer(s): ${row.eventsPerSecond} ev/s after ${row.startUpMs} ms of ` +
            `start-up (minimal x ${consumers}: ${row.minimalEventsPerSecond}), ${row.workerCpuUsPerEvent} µs worker cpu/event`,
        );
      }
    }
    const end = machineState();
    writeResults('scale', { bench: 'scale', transitions: TRANSITIONS, eventsPerConsumer, start, end, rows }, [
      `# scale benchmark (${end.at})`,
      '',
      `Each consumer replays the same seeded journal (${TRANSITIONS} transitions, ${eventsPerConsumer} events, a checkpoint every`,
      `${CHECKPOINT_EVERY} batches) from the floor to its cut through Temporal (consumerWorkflow, from_floor), on 1 or 2`,
      'worker processes with the default settings, one reference server process, one scratch database per row.',
      `Committed positions are polled (${COMMIT_POLL_MS} ms, a few consumers per poll in turn). Start-up excluded: events/s`,
      "= the events committed after the last consumer's first commit was seen, over the time from then to the last cut",
      'commit. minimal x N = N minimal consumers (bench/minimal-consumer.ts) in one process against the same server,',
      'measured the same way. Speed-up against 1 consumer on the same number of workers. Worker cpu = user+system of the',
      'worker processes over the whole run (start-up included), per event. The Temporal dev server, Postgres and the',
      'reference server share the machine.',
      describeMachine(start, end),
      '',
      ...table(
        [
          'workers',
          'consumers',
          'wall ms',
          'start-up ms',
          'events/s',
          'minimal x N events/s',
          'vs minimal',
          'speed-up vs 1 consumer',
          'worker cpu µs/event',
        ],
        rows.map((r) => [
          r.workers,
          r.consumers,
          r.wallMs,
          r.startUpMs,
          r.eventsPerSecond,
          r.minimalEventsPerSecond,
          r.ratioToMinimal,
          r.speedup,
          r.workerCpuUsPerEvent,
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
