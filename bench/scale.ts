// Scale: N consumers (default 1, 10, 50) replaying the same seeded journal from the floor to its cut through
// Temporal, on one worker process and on two (`worker/main.ts` as operators run it, the worker's defaults apart
// from a bundle built once), against one reference server in a child process and a scratch database per
// configuration. Reports total events/s over the wall time from starting the workflows to the last consumer's
// cut commit, the workers' CPU per event, and the speed-up over one consumer: where it stops scaling. This tree
// only (no baseline). Needs TEMPORAL_CLI (scripts/ensure-temporal-cli.sh). Writes bench/results/scale.json
// and scale.md.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode } from '@temporalio/worker';
import { createPool, loadCommitted } from '../db/index.js';
import type { consumerWorkflow } from '../workflows/index.js';
import {
  consumerIdSearchAttribute,
  consumerWorkflowId,
  kindSearchAttribute,
  phaseSearchAttribute,
} from '../workflows/definitions.js';
import {
  API_KEY,
  captureFrames,
  probeHead,
  startSimulator,
  stopSimulator,
  type Simulator,
} from './simulator-process.js';
import {
  describeMachine,
  machineState,
  ROOT,
  round,
  table,
  withScratchDatabase,
  writeResults,
  type BenchContext,
} from './support.js';

const CONSUMERS = (process.env.BENCH_SCALE_CONSUMERS ?? '1,10,50').split(',').map(Number);
const WORKERS = (process.env.BENCH_SCALE_WORKERS ?? '1,2').split(',').map(Number);
const TRANSITIONS = Number(process.env.BENCH_SCALE_TRANSITIONS ?? 1_000);
const CHECKPOINT_EVERY = 100;
const DONE_TIMEOUT_MS = Number(process.env.BENCH_SCALE_TIMEOUT_MS ?? 600_000);
const NAMESPACE = 'default';

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

interface Worker {
  child: ChildProcess;
  running: Promise<void>;
  exited: Promise<void>;
  stderr: string[];
}

function spawnWorker(env: Record<string, string>): Worker {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'worker/main.ts')], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stderr: string[] = [];
  createInterface({ input: child.stderr }).on('line', (line) => stderr.push(line));
  const lastLines: string[] = [];
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const running = new Promise<void>((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (line.includes('"worker running"')) resolve();
      lastLines.push(line);
      if (lastLines.length > 5) lastLines.shift();
    });
    void exited.then(() =>
      reject(new Error(`worker exited before running: ${[...lastLines, ...stderr.slice(-5)].join('\n')}`)),
    );
  });
  return { child, running, exited, stderr };
}

/** utime + stime of a live process from /proc, in ms (clock ticks of 10 ms, Linux's USER_HZ). */
function processCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

async function stopWorker(worker: Worker): Promise<void> {
  if (worker.child.exitCode !== null || worker.child.signalCode !== null) return;
  worker.child.kill('SIGTERM');
  const killed = setTimeout(() => worker.child.kill('SIGKILL'), 30_000);
  await worker.exited;
  clearTimeout(killed);
}

async function configuration(
  env: TestWorkflowEnvironment,
  bundlePath: string,
  sim: Simulator,
  head: number,
  eventsPerConsumer: number,
  workers: number,
  consumers: number,
): Promise<Omit<ScaleRow, 'speedup'>> {
  return withScratchDatabase('whalehunt_bench_scale', async (dbUrl) => {
    const taskQueue = `bench-scale-${randomUUID().slice(0, 8)}`;
    const workerEnv = {
      DATABASE_URL: dbUrl,
      TEMPORAL_ADDRESS: env.address,
      TEMPORAL_NAMESPACE: NAMESPACE,
      TASK_QUEUE: taskQueue,
      WHALEHUNT_URL: sim.url,
      WHALEHUNT_API_KEY: API_KEY,
      WORKFLOW_BUNDLE_PATH: bundlePath,
      LOG_LEVEL: 'INFO', // "worker running" is logged at INFO
    };
    const pool = createPool(dbUrl, { max: 2 });
    const started = Array.from({ length: workers }, () => spawnWorker(workerEnv));
    try {
      await Promise.all(started.map((w) => w.running));
      const cpuBefore = started.map((w) => processCpuMs(w.child.pid!));
      const ids = Array.from({ length: consumers }, (_, i) => `scale-${i}-${randomUUID().slice(0, 8)}`);
      const t = performance.now();
      await Promise.all(
        ids.map((consumerId, i) =>
          env.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
            taskQueue,
            workflowId: consumerWorkflowId(consumerId),
            args: [{ consumerId, subscriptionId: `sub-scale-${i}`, filter: {}, initialStart: 'from_floor' }],
            typedSearchAttributes: [
              { key: consumerIdSearchAttribute, value: consumerId },
              { key: phaseSearchAttribute, value: 'streaming' },
            ],
          }),
        ),
      );
      const pending = new Set(ids);
      while (pending.size > 0) {
        if (performance.now() - t > DONE_TIMEOUT_MS)
          throw new Error(`${pending.size} of ${consumers} consumers short of the cut after ${DONE_TIMEOUT_MS} ms`);
        for (const id of [...pending]) if ((await loadCommitted(pool, id))?.position === head) pending.delete(id);
        if (pending.size > 0) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const wallMs = performance.now() - t;
      const cpuMs = started.reduce((sum, w, i) => sum + processCpuMs(w.child.pid!) - cpuBefore[i]!, 0);
      await Promise.all(
        ids.map((id) =>
          env.client.workflow
            .getHandle(consumerWorkflowId(id))
            .terminate('bench done')
            .catch(() => undefined),
        ),
      );
      const events = eventsPerConsumer * consumers;
      return {
        workers,
        consumers,
        eventsPerConsumer,
        wallMs: Math.round(wallMs),
        totalEventsPerSecond: Math.round(events / (wallMs / 1000)),
        perConsumerEventsPerSecond: Math.round(eventsPerConsumer / (wallMs / 1000)),
        workerCpuUsPerEvent: round((cpuMs * 1000) / events),
      };
    } finally {
      await Promise.all(started.map(stopWorker));
      await pool.end();
    }
  });
}

export async function runScaleBench(_ctx: BenchContext): Promise<void> {
  const cli = process.env.TEMPORAL_CLI;
  if (!cli) throw new Error('the scale bench needs TEMPORAL_CLI (the path scripts/ensure-temporal-cli.sh prints)');
  const start = machineState();
  const env = await TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: cli },
      ip: '127.0.0.1',
      namespace: NAMESPACE,
      searchAttributes: [consumerIdSearchAttribute, phaseSearchAttribute, kindSearchAttribute],
      log: { format: 'pretty', level: 'warn' },
    },
  });
  const dir = await mkdtemp(join(tmpdir(), 'whalehunt-bench-scale-'));
  const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery: CHECKPOINT_EVERY });
  try {
    const bundlePath = join(dir, 'workflow-bundle.js');
    const { code } = await bundleWorkflowCode({ workflowsPath: join(ROOT, 'workflows/index.ts') });
    await writeFile(bundlePath, code);
    const head = await probeHead(sim.url);
    const eventsPerConsumer = (await captureFrames(sim.url, head)).reduce(
      (n, text) =>
        n + (text.includes('"type":"batch"') ? (JSON.parse(text) as { events: unknown[] }).events.length : 0),
      0,
    );
    const rows: ScaleRow[] = [];
    for (const workers of WORKERS) {
      let single: number | null = null;
      for (const consumers of CONSUMERS) {
        const row = await configuration(env, bundlePath, sim, head, eventsPerConsumer, workers, consumers);
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
