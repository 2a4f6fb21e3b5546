// The worker's memory over a long replay against a bare Temporal worker's (issue 22): this tree's worker as
// operators run it (compiled: dist/worker/main.js, built first if stale, the defaults, its own workflow bundle)
// replays a seeded journal of BENCH_MEMORY_TRANSITIONS (default 400,000: about a million events, a checkpoint every
// 1,000 batches) from the floor to its cut as one consumerWorkflow through a local Temporal dev server. Its resident
// set is read from /proc every RSS_EVERY_MS with the position committed by then; reported are its idle RSS before
// the replay, the peak (VmHWM), the RSS at shares of the journal, and the mean of the last quarter of the replay
// against the first. The anchor is the idle RSS of a bare worker (bench/bare-worker.ts, compiled the same way, a
// trivial workflow run once) on the same server. The worker replays twice, at the default HEAP_GROWTH_PERCENT and
// with it off (V8's own heap growth), each with its CPU per event: what the bound on the heap costs. This tree only.
// Needs TEMPORAL_CLI and Linux /proc. Writes bench/results/memory.json and memory.md.
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode } from '@temporalio/worker';
import ts from 'typescript';
import { createPool, loadCommitted } from '../db/index.js';
import { DEFAULT_HEAP_GROWTH_PERCENT } from '../worker/config.js';
import { processCpuMs, processRssKiB } from './proc-cpu.js';
import { SEED, probeHead, startSimulator, stopSimulator, type Simulator } from './simulator-process.js';
import {
  describeMachine,
  machineState,
  median,
  ROOT,
  round,
  table,
  withScratchDatabase,
  writeResults,
  type BenchContext,
} from './support.js';
import {
  benchWorkerEnv,
  NAMESPACE,
  spawnWorkerProcess,
  startConsumers,
  startTemporal,
  stopWorker,
  terminateAll,
  type WorkerProcess,
} from './temporal-env.js';

const TRANSITIONS = Number(process.env.BENCH_MEMORY_TRANSITIONS ?? 400_000);
const CHECKPOINT_EVERY = 1_000;
const RSS_EVERY_MS = 500;
/** The setting of the judged replay: the worker's default unless BENCH_HEAP_GROWTH_PERCENT tries another. */
const HEAP_GROWTH = process.env.BENCH_HEAP_GROWTH_PERCENT ?? String(DEFAULT_HEAP_GROWTH_PERCENT);
/** How long a worker idles before its resident set is read: past start-up's garbage and first collections. */
const IDLE_MS = Number(process.env.BENCH_MEMORY_IDLE_MS ?? 10_000);
/** Shares of the journal's positions at which the RSS is reported. */
const MARKS = [0.1, 0.25, 0.5, 0.75, 1];
/** Issue 22's bounds: the peak at most the bare worker's idle RSS + this, the last quarter within FLAT of the first. */
const HEADROOM_MIB = 128;
const FLAT = 0.1;
const REPLAY_TIMEOUT_MS = 1_800_000;
/** Where the bare worker is compiled to: inside the checkout, so that it resolves the SDK from node_modules. */
const BARE_DIR = join(ROOT, 'node_modules/.cache/whalehunt-bench');

interface RssSample {
  /** since the replay started */
  ms: number;
  /** the committed position by then, 0 before the first commit */
  position: number;
  rssMib: number;
}

/** One replay by the worker at one heap setting. */
interface WorkerReplay {
  /** HEAP_GROWTH_PERCENT as the worker got it */
  heapGrowth: string;
  head: number;
  workerIdleRssMib: number;
  /** the worker process's CPU over the replay per event applied */
  cpuUsPerEvent: number;
  wallMs: number;
  /** VmHWM of the worker process at the end: its peak, start-up included */
  peakRssMib: number;
  peakSampledRssMib: number;
  /** RSS at each of MARKS of the journal committed (the first sample at or past it) */
  rssAtMib: number[];
  /** median RSS over the first and the last quarter of the replay's wall time */
  firstQuarterMib: number;
  lastQuarterMib: number;
  samples: number;
  /** every sample as [ms since the replay started, committed position, RSS MiB], to read the climb from idle */
  series: [number, number, number][];
}

/** The default setting's replay (judged) and V8's own heap growth beside it. */
export interface MemoryResult extends WorkerReplay {
  commit: string;
  transitions: number;
  bareIdleRssMib: number;
  v8Growth: WorkerReplay;
  targets: { peakMib: number; peakMet: boolean; flat: number; flatMet: boolean };
}

const mib = (kib: number) => round(kib / 1024);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The build operators run (npm run build), when dist/ is not a build of the current sources. */
function buildIfStale(): void {
  const build = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'scripts/build.ts'), '--if-stale'], {
    cwd: ROOT,
    stdio: 'inherit',
  });
  if (build.status !== 0) throw new Error(`the build failed (exit ${build.status ?? build.signal})`);
}

/** bench/bare-worker.ts as plain JavaScript (tsc's transpilation, as the build emits ours) and its bundle. */
async function compileBareWorker(): Promise<{ entry: string; bundlePath: string }> {
  mkdirSync(BARE_DIR, { recursive: true });
  const source = readFileSync(join(ROOT, 'bench/bare-worker.ts'), 'utf8');
  const { outputText } = ts.transpileModule(source, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  const entry = join(BARE_DIR, 'bare-worker.mjs');
  writeFileSync(entry, outputText);
  const { code } = await bundleWorkflowCode({ workflowsPath: join(ROOT, 'bench/bare-workflows.ts') });
  const bundlePath = join(BARE_DIR, 'bare-workflow-bundle.js');
  writeFileSync(bundlePath, code);
  return { entry, bundlePath };
}

/** The bare worker's RSS after it has run one trivial workflow and idled IDLE_MS. */
async function bareIdleRss(env: TestWorkflowEnvironment): Promise<number> {
  const { entry, bundlePath } = await compileBareWorker();
  const taskQueue = `bench-bare-${randomUUID().slice(0, 8)}`;
  const worker = spawnWorkerProcess([entry], ROOT, {
    TEMPORAL_ADDRESS: env.address,
    TEMPORAL_NAMESPACE: NAMESPACE,
    TASK_QUEUE: taskQueue,
    WORKFLOW_BUNDLE_PATH: bundlePath,
  });
  try {
    await worker.running;
    await env.client.workflow.execute('trivialWorkflow', { taskQueue, workflowId: `bare-${randomUUID()}` });
    await sleep(IDLE_MS);
    return mib(processRssKiB(worker.child.pid!).rss);
  } finally {
    await stopWorker(worker);
  }
}

/** Samples `worker`'s RSS and the consumer's committed position until it is at `head`. */
async function sampleReplay(
  worker: WorkerProcess,
  pool: ReturnType<typeof createPool>,
  consumerId: string,
  head: number,
): Promise<{ samples: RssSample[]; wallMs: number }> {
  const samples: RssSample[] = [];
  const t = performance.now();
  for (;;) {
    const position = (await loadCommitted(pool, consumerId))?.position ?? 0;
    samples.push({ ms: performance.now() - t, position, rssMib: mib(processRssKiB(worker.child.pid!).rss) });
    if (position === head) return { samples, wallMs: performance.now() - t };
    if (performance.now() - t > REPLAY_TIMEOUT_MS) throw new Error(`the replay is at ${position} of ${head}`);
    await sleep(RSS_EVERY_MS);
  }
}

async function measureWorker(
  env: TestWorkflowEnvironment,
  sim: Simulator,
  head: number,
  heapGrowth: string,
): Promise<WorkerReplay> {
  return withScratchDatabase('whalehunt_bench_memory', async (dbUrl) => {
    const taskQueue = `bench-memory-${randomUUID().slice(0, 8)}`;
    const worker = spawnWorkerProcess([join(ROOT, 'dist/worker/main.js')], ROOT, {
      ...benchWorkerEnv({ dbUrl, env, taskQueue, sim }),
      HEAP_GROWTH_PERCENT: heapGrowth,
    });
    const pool = createPool(dbUrl, { max: 1 });
    const consumerId = `memory-${randomUUID().slice(0, 8)}`;
    try {
      await worker.running;
      await sleep(IDLE_MS);
      const workerIdleRssMib = mib(processRssKiB(worker.child.pid!).rss);
      const cpuBefore = processCpuMs(worker.child.pid!);
      await startConsumers(env, taskQueue, [consumerId]);
      const { samples, wallMs } = await sampleReplay(worker, pool, consumerId, head);
      const cpuMs = processCpuMs(worker.child.pid!) - cpuBefore;
      const peakRssMib = mib(processRssKiB(worker.child.pid!).peak);
      const events = (await loadCommitted(pool, consumerId))?.totals?.eventsApplied;
      if (!events) throw new Error(`the replay of ${consumerId} applied no events`);
      await terminateAll(env, [consumerId]);
      const quarter = (from: number, to: number) =>
        round(median(samples.filter((s) => s.ms >= from * wallMs && s.ms <= to * wallMs).map((s) => s.rssMib)));
      return {
        heapGrowth,
        head,
        workerIdleRssMib,
        cpuUsPerEvent: round((cpuMs * 1000) / events),
        wallMs: Math.round(wallMs),
        peakRssMib,
        peakSampledRssMib: Math.max(...samples.map((s) => s.rssMib)),
        rssAtMib: MARKS.map((share) => (samples.find((s) => s.position >= share * head) ?? samples.at(-1)!).rssMib),
        firstQuarterMib: quarter(0, 0.25),
        lastQuarterMib: quarter(0.75, 1),
        samples: samples.length,
        series: samples.map((s) => [Math.round(s.ms), s.position, s.rssMib]),
      };
    } finally {
      await stopWorker(worker);
      await pool.end();
    }
  });
}

export async function runMemoryBench(ctx: BenchContext): Promise<void> {
  buildIfStale();
  const env = await startTemporal('memory');
  const start = machineState();
  const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery: CHECKPOINT_EVERY });
  let result: MemoryResult;
  try {
    const head = await probeHead(sim.url);
    const bareIdleRssMib = await bareIdleRss(env);
    const worker = await measureWorker(env, sim, head, HEAP_GROWTH);
    const v8Growth = await measureWorker(env, sim, head, 'off');
    const peakMib = round(bareIdleRssMib + HEADROOM_MIB);
    const flat = round(worker.lastQuarterMib / worker.firstQuarterMib - 1, 3);
    result = {
      commit: ctx.after.commit,
      transitions: TRANSITIONS,
      bareIdleRssMib,
      ...worker,
      v8Growth,
      targets: { peakMib, peakMet: worker.peakRssMib <= peakMib, flat, flatMet: Math.abs(flat) <= FLAT },
    };
    console.log(
      `bare worker idle ${bareIdleRssMib} MiB; worker idle ${worker.workerIdleRssMib} MiB, peak ${worker.peakRssMib} MiB, ` +
        `first/last quarter ${worker.firstQuarterMib}/${worker.lastQuarterMib} MiB, ${worker.cpuUsPerEvent} µs/event; ` +
        `heap growth off: peak ${v8Growth.peakRssMib} MiB, ${v8Growth.cpuUsPerEvent} µs/event`,
    );
  } finally {
    await stopSimulator(sim);
    await env.teardown();
  }
  const end = machineState();
  const r = result;
  writeResults('memory', { bench: 'memory', seed: SEED, checkpointEvery: CHECKPOINT_EVERY, start, end, ...r }, [
    `# memory benchmark (${end.at})`,
    '',
    `The compiled worker (dist/worker/main.js of ${r.commit}, the default settings) replays a seeded journal (seed ${SEED},`,
    `${TRANSITIONS} transitions, a checkpoint every ${CHECKPOINT_EVERY} batches, head ${r.head}) from the floor to its cut as`,
    'one consumerWorkflow through a local Temporal dev server. Its resident set (VmRSS) is read from /proc every',
    `${RSS_EVERY_MS} ms with the committed position; idle = after "worker running" and ${IDLE_MS} ms, before the replay;`,
    'peak = VmHWM at the end (start-up included); RSS at x% = the first sample once x% of the journal is committed;',
    'quarters = the median sample over the first and the last quarter of the wall time. The anchor: a bare Temporal',
    'worker (bench/bare-worker.ts, transpiled by tsc, a trivial workflow bundled the same way and run once), idle',
    `${IDLE_MS} ms. Targets: peak <= bare idle + ${HEADROOM_MIB} MiB (${r.targets.peakMib} MiB); last quarter within`,
    `${FLAT * 100}% of the first. The first row is the default HEAP_GROWTH_PERCENT (judged), the second the same`,
    "replay with it off (V8's own heap growth); cpu = the worker process's over the replay per event applied.",
    describeMachine(start, end),
    '',
    ...table(
      [
        'HEAP_GROWTH_PERCENT',
        'bare worker idle MiB',
        'worker idle MiB',
        'worker cpu µs/event',
        'wall ms',
        'peak MiB',
        'peak sampled MiB',
        ...MARKS.map((m) => `RSS at ${m * 100}% MiB`),
        'first quarter MiB',
        'last quarter MiB',
      ],
      [r, r.v8Growth].map((w) => [
        w.heapGrowth,
        r.bareIdleRssMib,
        w.workerIdleRssMib,
        w.cpuUsPerEvent,
        w.wallMs,
        w.peakRssMib,
        w.peakSampledRssMib,
        ...w.rssAtMib,
        w.firstQuarterMib,
        w.lastQuarterMib,
      ]),
    ),
    '',
  ]);
}
