// What the benches that run consumers through Temporal share (scale, temporal): a local Temporal dev server
// (TEMPORAL_CLI), a tree's workflow bundle, worker processes (`worker/main.ts` of a tree, as operators run it),
// and one replay of the reference server's journal by N consumers from the floor to the cut.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode } from '@temporalio/worker';
import type * as Db from '../db/index.js';
import type { consumerWorkflow } from '../workflows/index.js';
import {
  consumerIdSearchAttribute,
  consumerWorkflowId,
  kindSearchAttribute,
  phaseSearchAttribute,
  type ConsumerTuning,
} from '../workflows/definitions.js';
import { backendsCpuMs, HAS_PROC, processCpuMs, type PostgresCpu } from './proc-cpu.js';
import { API_KEY, probeHead, type Simulator } from './simulator-process.js';
import { cpuProfileArgs, importFrom, withScratchDatabase, type Target } from './support.js';
import { WORKER_NODE_FLAGS } from '../worker/node-flags.js';

export const NAMESPACE = 'default';
/** How often a replay's committed positions are polled: 10 ms is well under 1% of a timed replay. */
export const COMMIT_POLL_MS = 10;

/** A local Temporal dev server with the consumer's search attributes. */
export async function startTemporal(bench: string): Promise<TestWorkflowEnvironment> {
  const cli = process.env.TEMPORAL_CLI;
  if (!cli) throw new Error(`the ${bench} bench needs TEMPORAL_CLI (the path scripts/ensure-temporal-cli.sh prints)`);
  return TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: cli },
      ip: '127.0.0.1',
      namespace: NAMESPACE,
      searchAttributes: [consumerIdSearchAttribute, phaseSearchAttribute, kindSearchAttribute],
      log: { format: 'pretty', level: 'warn' },
    },
  });
}

/** The target's workflow bundle, built once into `dir`: workers start without bundling. */
export async function bundleWorkflows(target: Target, dir: string): Promise<string> {
  const path = join(dir, `workflow-bundle-${target.label}.js`);
  const { code } = await bundleWorkflowCode({ workflowsPath: join(target.root, 'workflows/index.ts') });
  await writeFile(path, code);
  return path;
}

export interface WorkerProcess {
  child: ChildProcess;
  running: Promise<void>;
  exited: Promise<void>;
  stderr: string[];
}

/** A tree's `worker/main.ts` through tsx, as the benches that compare trees run it. */
function spawnWorker(target: Target, env: Record<string, string>): WorkerProcess {
  return spawnWorkerProcess(['--import', 'tsx', join(target.root, 'worker/main.ts')], target.root, env);
}

/** `node <args>` in `cwd`, with the worker's Node flags: a worker process that logs "worker running" once it polls. */
export function spawnWorkerProcess(args: string[], cwd: string, env: Record<string, string>): WorkerProcess {
  const child = spawn(process.execPath, [...WORKER_NODE_FLAGS, ...cpuProfileArgs(), ...args], {
    cwd,
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

export async function stopWorker(worker: WorkerProcess): Promise<void> {
  if (worker.child.exitCode !== null || worker.child.signalCode !== null) return;
  worker.child.kill('SIGTERM');
  const killed = setTimeout(() => worker.child.kill('SIGKILL'), 30_000);
  await worker.exited;
  clearTimeout(killed);
}

export interface TemporalReplay {
  /** from starting the workflows to the last consumer's cut commit seen */
  wallMs: number;
  /** user+system CPU of the worker processes over the same window */
  workerCpuMs: number;
  /**
   * The rest of the machine's CPU over the window, from /proc (null where it cannot be read): the backends of the
   * replay's database (the bench's polling connection included), the reference server, the Temporal dev server.
   */
  postgresBackendsCpuMs: number | null;
  serverCpuMs: number | null;
  temporalServerCpuMs: number | null;
  /** with `eventsAt`: the window from every consumer's first commit to the last cut commit, start-up excluded */
  steady: { wallMs: number; events: number } | null;
}

/** The worker's, Postgres's, the reference server's and the Temporal server's CPU of a replay, ms (null: unread). */
export function machineCpuOfReplay(replay: TemporalReplay): number | null {
  const { postgresBackendsCpuMs: pg, serverCpuMs: server, temporalServerCpuMs: temporal } = replay;
  return pg === null || server === null || temporal === null ? null : replay.workerCpuMs + pg + server + temporal;
}

/**
 * `consumers` consumerWorkflows (from_floor, filter {}) on `workers` worker processes of `target` with the
 * default settings, a scratch database of their own, until every consumer's committed position is `head`
 * (polled every `pollMs`). Workers start, and migrate, before the clock does.
 */
export function replayThroughTemporal(options: {
  env: TestWorkflowEnvironment;
  target: Target;
  bundlePath: string;
  sim: Simulator;
  head: number;
  workers: number;
  consumers: number;
  pollMs: number;
  timeoutMs: number;
  /** where the machine's other CPU is read; without it only the workers' is */
  postgres?: PostgresCpu;
  /** the events of the journal up to each checkpoint position: measures the steady window too */
  eventsAt?: ReadonlyMap<number, number>;
}): Promise<TemporalReplay> {
  const { env, target, sim, head, workers, consumers, postgres, eventsAt } = options;
  return withScratchDatabase('whalehunt_bench_temporal', async (dbUrl) => {
    const db = await importFrom<typeof Db>(target, 'db/index.ts');
    const taskQueue = `bench-temporal-${randomUUID().slice(0, 8)}`;
    const workerEnv = benchWorkerEnv({ dbUrl, env, taskQueue, sim, bundlePath: options.bundlePath });
    const pool = db.createPool(dbUrl, { max: 2 });
    const started = Array.from({ length: workers }, () => spawnWorker(target, workerEnv));
    try {
      await Promise.all(started.map((w) => w.running));
      const database = new URL(dbUrl).pathname.slice(1);
      const temporalPid = HAS_PROC ? devServerPid(env.address) : null;
      const others = () => ({
        postgres: postgres?.available ? postgres.sample(database) : null,
        server: HAS_PROC ? processCpuMs(sim.process.pid!) : null,
        temporal: temporalPid === null ? null : processCpuMs(temporalPid),
      });
      const cpuBefore = started.map((w) => processCpuMs(w.child.pid!));
      const othersBefore = others();
      const ids = Array.from({ length: consumers }, (_, i) => `bench-${i}-${randomUUID().slice(0, 8)}`);
      const t = performance.now();
      await startConsumers(env, taskQueue, ids);
      const firstCommits = await untilCommittedAt(db, pool, ids, head, {
        pollMs: options.pollMs,
        deadline: t + options.timeoutMs,
      });
      const wallMs = performance.now() - t;
      const workerCpuMs = started.reduce((sum, w, i) => sum + processCpuMs(w.child.pid!) - cpuBefore[i]!, 0);
      const othersAfter = others();
      const delta = (a: number | null, b: number | null) => (a === null || b === null ? null : b - a);
      await terminateAll(env, ids);
      return {
        wallMs,
        workerCpuMs,
        postgresBackendsCpuMs: backendsCpuMs(othersBefore.postgres, othersAfter.postgres),
        serverCpuMs: delta(othersBefore.server, othersAfter.server),
        temporalServerCpuMs: delta(othersBefore.temporal, othersAfter.temporal),
        steady: eventsAt ? steadyWindow(firstCommits, eventsAt, head, t + wallMs) : null,
      };
    } finally {
      await Promise.all(started.map(stopWorker));
      await pool.end();
    }
  });
}

/**
 * Start-up excluded: from the moment the last consumer had made its first commit to the end, and the events the
 * consumers committed in between (the journal's events up to the cut, less those up to each one's first commit).
 */
function steadyWindow(
  firstCommits: FirstCommit[],
  eventsAt: ReadonlyMap<number, number>,
  head: number,
  endedAt: number,
): { wallMs: number; events: number } {
  const events = (position: number) => {
    const n = eventsAt.get(position);
    if (n === undefined) throw new Error(`committed position ${position} is not a checkpoint of the journal`);
    return n;
  };
  const from = Math.max(...firstCommits.map((c) => c.at));
  return {
    wallMs: endedAt - from,
    events: firstCommits.reduce((sum, c) => sum + events(head) - events(c.position), 0),
  };
}

export interface IdleLeaseCost {
  /** the worker process's user+system CPU per second of the window */
  workerCpuMsPerS: number;
  /** the Temporal dev server's user+system CPU per second of the window */
  serverCpuMsPerS: number;
}

/**
 * The standing price of the streaming leases' heartbeats: `consumers` consumers on one worker (HEARTBEAT_MS
 * `heartbeatEveryMs`, leases with `heartbeatTimeoutMs`) stream to the head of a journal that no longer grows, then
 * the worker's and the Temporal server's CPU are read over `windowMs` while they only heartbeat.
 */
export function idleLeaseCost(options: {
  env: TestWorkflowEnvironment;
  target: Target;
  bundlePath: string;
  sim: Simulator;
  consumers: number;
  windowMs: number;
  heartbeatEveryMs: number;
  heartbeatTimeoutMs: number;
}): Promise<IdleLeaseCost> {
  const { env, target, sim } = options;
  return withScratchDatabase('whalehunt_bench_heartbeat', async (dbUrl) => {
    const db = await importFrom<typeof Db>(target, 'db/index.ts');
    const taskQueue = `bench-heartbeat-${randomUUID().slice(0, 8)}`;
    const worker = spawnWorker(target, {
      ...benchWorkerEnv({ dbUrl, env, taskQueue, sim, bundlePath: options.bundlePath }),
      HEARTBEAT_MS: String(options.heartbeatEveryMs),
    });
    const pool = db.createPool(dbUrl, { max: 2 });
    const ids = Array.from({ length: options.consumers }, (_, i) => `idle-${i}-${randomUUID().slice(0, 8)}`);
    try {
      await worker.running;
      await startConsumers(env, taskQueue, ids, { heartbeatTimeoutMs: options.heartbeatTimeoutMs });
      await untilCommittedAt(db, pool, ids, await probeHead(sim.url), {
        pollMs: 200,
        deadline: performance.now() + 120_000,
      });
      const serverPid = devServerPid(env.address);
      const workerBefore = processCpuMs(worker.child.pid!);
      const serverBefore = processCpuMs(serverPid);
      const t = performance.now();
      await new Promise((resolve) => setTimeout(resolve, options.windowMs));
      const seconds = (performance.now() - t) / 1000;
      const cost = {
        workerCpuMsPerS: (processCpuMs(worker.child.pid!) - workerBefore) / seconds,
        serverCpuMsPerS: (processCpuMs(serverPid) - serverBefore) / seconds,
      };
      await terminateAll(env, ids);
      return cost;
    } finally {
      await stopWorker(worker);
      await pool.end();
    }
  });
}

/** A bench worker process's environment: the defaults, with a scratch database, the dev server and the simulator. */
export function benchWorkerEnv(target: {
  dbUrl: string;
  env: TestWorkflowEnvironment;
  taskQueue: string;
  sim: Simulator;
  /** none: the worker's own (a compiled worker loads the bundle its build wrote) */
  bundlePath?: string;
}): Record<string, string> {
  return {
    DATABASE_URL: target.dbUrl,
    TEMPORAL_ADDRESS: target.env.address,
    TEMPORAL_NAMESPACE: NAMESPACE,
    TASK_QUEUE: target.taskQueue,
    WHALEHUNT_URL: target.sim.url,
    WHALEHUNT_API_KEY: API_KEY,
    ...(target.bundlePath ? { WORKFLOW_BUNDLE_PATH: target.bundlePath } : {}),
    LOG_LEVEL: 'INFO', // "worker running" is logged at INFO
  };
}

/** One consumerWorkflow per id (from_floor, filter {}), each on a subscription of its own. */
export async function startConsumers(
  env: TestWorkflowEnvironment,
  taskQueue: string,
  ids: string[],
  tuning?: ConsumerTuning,
): Promise<void> {
  await Promise.all(
    ids.map((consumerId, i) =>
      env.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
        taskQueue,
        workflowId: consumerWorkflowId(consumerId),
        args: [
          {
            consumerId,
            subscriptionId: `sub-bench-${i}`,
            filter: {},
            initialStart: 'from_floor',
            ...(tuning ? { tuning } : {}),
          },
        ],
        typedSearchAttributes: [
          { key: consumerIdSearchAttribute, value: consumerId },
          { key: phaseSearchAttribute, value: 'streaming' },
        ],
      }),
    ),
  );
}

/** A consumer's first committed position seen, and when (performance.now()). */
interface FirstCommit {
  position: number;
  at: number;
}

/** Committed positions read per poll: the polling costs the same at 1 consumer as at 50. */
const QUERIES_PER_POLL = 5;

/**
 * Polls the consumers' committed positions, QUERIES_PER_POLL of them every `pollMs` in turn, until all are at
 * `position`; past `deadline`, throws. Resolves with each one's first commit seen.
 */
async function untilCommittedAt(
  db: typeof Db,
  pool: ReturnType<typeof Db.createPool>,
  ids: string[],
  position: number,
  { pollMs, deadline }: { pollMs: number; deadline: number },
): Promise<FirstCommit[]> {
  const first = new Map<string, FirstCommit>();
  const pending = [...ids];
  while (pending.length > 0) {
    if (performance.now() > deadline)
      throw new Error(`${pending.length} of ${ids.length} consumers short of ${position}`);
    for (let k = Math.min(QUERIES_PER_POLL, pending.length); k > 0; k--) {
      const id = pending.shift()!;
      const committed = (await db.loadCommitted(pool, id))?.position;
      if (committed !== undefined && committed !== null && !first.has(id))
        first.set(id, { position: committed, at: performance.now() });
      if (committed !== position) pending.push(id);
    }
    if (pending.length > 0) await new Promise((resolve) => setTimeout(resolve, pollMs));
  }
  return ids.map((id) => first.get(id)!);
}

export async function terminateAll(env: TestWorkflowEnvironment, ids: string[]): Promise<void> {
  await Promise.all(
    ids.map((id) =>
      env.client.workflow
        .getHandle(consumerWorkflowId(id))
        .terminate('bench done')
        .catch(() => undefined),
    ),
  );
}

/** The pid of the dev server listening on `address` (its command line names the port). */
export function devServerPid(address: string): number {
  const port = address.split(':').at(-1)!;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let cmdline: string[];
    try {
      cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
    } catch {
      continue;
    }
    if (cmdline.includes('start-dev') && cmdline.includes(port)) return Number(entry);
  }
  throw new Error(`no Temporal dev server process found for ${address}`);
}
