// Scale: N consumers (default 1, 10, 50) replaying the same seeded journal from the floor to its cut through
// Temporal, on one worker process and on two (`worker/main.ts` as operators run it, the worker's defaults apart
// from a bundle built once), against one reference server in a child process and a scratch database per
// configuration. Reports total events/s over the wall time from starting the workflows to the last consumer's
// cut commit, the workers' CPU per event, and the speed-up over one consumer: where it stops scaling. This tree
// only (no baseline). Needs TEMPORAL_CLI (scripts/ensure-temporal-cli.sh). Writes bench/results/scale.json
// and scale.md.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { probeHead, replayFrames, startSimulator, stopSimulator, type Simulator } from './simulator-process.js';
import {
  describeMachine,
  machineState,
  round,
  table,
  writeResults,
  type BenchContext,
  type Target,
} from './support.js';
import { bundleWorkflows, replayThroughTemporal, startTemporal } from './temporal-env.js';

const CONSUMERS = (process.env.BENCH_SCALE_CONSUMERS ?? '1,10,50').split(',').map(Number);
const WORKERS = (process.env.BENCH_SCALE_WORKERS ?? '1,2').split(',').map(Number);
const TRANSITIONS = Number(process.env.BENCH_SCALE_TRANSITIONS ?? 1_000);
const CHECKPOINT_EVERY = 100;
const DONE_TIMEOUT_MS = Number(process.env.BENCH_SCALE_TIMEOUT_MS ?? 600_000);

interface ScaleRow {
  workers: number;
  consumers: number;
  eventsPerConsumer: number;
  wallMs: number;
  totalEventsPerSecond: number;
  perConsumerEventsPerSecond: number;
  /** total events/s over the same worker count's 1-consumer figure */
  speedup: number;
  /** user+system CPU of all worker processes (start-up included) per event */
  workerCpuUsPerEvent: number;
}

async function configuration(
  env: TestWorkflowEnvironment,
  target: Target,
  bundlePath: string,
  sim: Simulator,
  head: number,
  eventsPerConsumer: number,
  workers: number,
  consumers: number,
): Promise<Omit<ScaleRow, 'speedup'>> {
  const { wallMs, workerCpuMs } = await replayThroughTemporal({
    env,
    target,
    bundlePath,
    sim,
    head,
    workers,
    consumers,
    pollMs: 100,
    timeoutMs: DONE_TIMEOUT_MS,
  });
  const events = eventsPerConsumer * consumers;
  return {
    workers,
    consumers,
    eventsPerConsumer,
    wallMs: Math.round(wallMs),
    totalEventsPerSecond: Math.round(events / (wallMs / 1000)),
    perConsumerEventsPerSecond: Math.round(eventsPerConsumer / (wallMs / 1000)),
    workerCpuUsPerEvent: round((workerCpuMs * 1000) / events),
  };
}

export async function runScaleBench(ctx: BenchContext): Promise<void> {
  const env = await startTemporal('scale');
  const start = machineState();
  const dir = await mkdtemp(join(tmpdir(), 'whalehunt-bench-scale-'));
  const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery: CHECKPOINT_EVERY });
  try {
    const bundlePath = await bundleWorkflows(ctx.after, dir);
    const head = await probeHead(sim.url);
    let eventsPerConsumer = 0;
    await replayFrames(sim.url, head, (text) => {
      if (text.includes('"type":"batch"'))
        eventsPerConsumer += (JSON.parse(text) as { events: unknown[] }).events.length;
    });
    const rows: ScaleRow[] = [];
    for (const workers of WORKERS) {
      let single: number | null = null;
      for (const consumers of CONSUMERS) {
        const row = await configuration(env, ctx.after, bundlePath, sim, head, eventsPerConsumer, workers, consumers);
        single ??= row.totalEventsPerSecond / row.consumers;
        rows.push({ ...row, speedup: round(row.totalEventsPerSecond / single, 2) });
        console.log(
          `${workers} worker(s), ${consumers} consumer(s): ${row.totalEventsPerSecond} ev/s total, ` +
            `${row.workerCpuUsPerEvent} µs worker cpu/event`,
        );
      }
    }
    const end = machineState();
    writeResults('scale', { bench: 'scale', transitions: TRANSITIONS, eventsPerConsumer, start, end, rows }, [
      `# scale benchmark (${end.at})`,
      '',
      `Each consumer replays the same seeded journal (${TRANSITIONS} transitions, ${eventsPerConsumer} events, a checkpoint every`,
      `${CHECKPOINT_EVERY} batches) from the floor to its cut through Temporal (consumerWorkflow, from_floor), on 1 or 2`,
      'worker processes with the default settings, one reference server process, one scratch database per row. Total',
      'events/s over the wall time from starting the workflows to the last cut commit; speed-up against 1 consumer on',
      'the same number of workers (1 consumer per worker count is the unit). Worker cpu = user+system of the worker',
      'processes over the run, per event. The Temporal dev server, Postgres and the reference server share the machine.',
      describeMachine(start, end),
      '',
      ...table(
        [
          'workers',
          'consumers',
          'wall ms',
          'total events/s',
          'events/s per consumer',
          'speed-up vs 1 consumer',
          'worker cpu µs/event',
        ],
        rows.map((r) => [
          r.workers,
          r.consumers,
          r.wallMs,
          r.totalEventsPerSecond,
          r.perConsumerEventsPerSecond,
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
