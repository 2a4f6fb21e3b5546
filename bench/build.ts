// The compiled build against TypeScript through tsx, in one run: the CPU of one `status` call, a worker's start
// (spawn to its "worker running" line: wall time and CPU) and its resident set once idle, for four ways of running
// the code, alternating over BENCH_ROUNDS rounds (default 3):
//   - before: the baseline tree (default BUILD_BASELINE_REF, this branch's starting point) as it ran: the package
//     bin `node cli/bin.js` and `node --import tsx worker/main.ts` (the image's command), bundling at start;
//   - tsx: this checkout's sources through tsx (`node --import tsx cli/main.ts`, `… worker/main.ts`);
//   - compiled: this checkout's dist/ (`node dist/cli/main.js`, `node dist/worker/main.js`, the prebuilt bundle);
//   - compiled, Node 24: the same on Node 24, the current LTS and the image's (scripts/ensure-node.sh 24).
// The first three run on this process's Node. Every status call asks the same consumer, streaming the reference
// server on a worker of its own; each worker measured polls a task queue of its own, so it stays idle. Needs
// TEMPORAL_CLI and a fresh `npm run build`. Writes bench/results/build.json and build.md.
import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import pg from 'pg';
import { buildProblem } from '../worker/build-info.js';
import { processCpuMs, processRssKiB, reapedChildrenCpuMs } from './proc-cpu.js';
import { API_KEY, startSimulator, stopSimulator } from './simulator-process.js';
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
  type MachineState,
  type Target,
} from './support.js';
import { startTemporal } from './temporal-env.js';
import { WORKER_NODE_FLAGS } from '../worker/node-flags.js';

/** This branch's starting point: the CLI and worker through tsx, the workflows bundled at every worker start. */
export const BUILD_BASELINE_REF = 'bd9e3e7';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** Measured status calls per way and round, after one unmeasured call (tsx's cache and the page cache warm). */
const STATUS_CALLS = Number(process.env.BENCH_STATUS_CALLS ?? 5);
/** How long a started worker idles before its resident set is read. */
const IDLE_MS = Number(process.env.BENCH_IDLE_MS ?? 20_000);
const CONSUMER = 'bench-build';

/** Issue 20's targets, compiled against before: a CLI call at most 1/4 of its CPU, a worker start at most 1/2. */
const TARGETS = { statusCpu: 0.25, workerStart: 0.5 };

const WAYS = ['before', 'tsx', 'compiled', 'compiled, Node 24'] as const;
type Way = (typeof WAYS)[number];

interface Commands {
  way: Way;
  commit: string;
  root: string;
  /** the node binary */
  node: string;
  cli: string[];
  worker: string[];
}

function commandsOf(way: Way, target: Target): Commands {
  const { root, commit } = target;
  const tsxWorker = ['--import', 'tsx', join(root, 'worker/main.ts')];
  // The compiled worker as `npm run worker` and the image start it.
  const compiled = {
    cli: [join(root, 'dist/cli/main.js')],
    worker: [...WORKER_NODE_FLAGS, join(root, 'dist/worker/main.js')],
  };
  switch (way) {
    case 'before':
      return { way, commit, root, node: process.execPath, cli: [join(root, 'cli/bin.js')], worker: tsxWorker };
    case 'tsx':
      return {
        way,
        commit,
        root,
        node: process.execPath,
        cli: ['--import', 'tsx', join(root, 'cli/main.ts')],
        worker: tsxWorker,
      };
    case 'compiled':
      return { way, commit, root, node: process.execPath, ...compiled };
    case 'compiled, Node 24': {
      const node = execFileSync('bash', [join(ROOT, 'scripts/ensure-node.sh'), '24'], { encoding: 'utf8' }).trim();
      return { way, commit, root, node, ...compiled };
    }
  }
}

interface StatusCall {
  cpuMs: number;
  wallMs: number;
}

/** One `status` call as a child process: its CPU from this process's reaped-children times, and its wall time. */
async function statusCall(commands: Commands, env: Record<string, string>): Promise<StatusCall> {
  const cpuBefore = reapedChildrenCpuMs();
  const startedAt = performance.now();
  const child = spawn(commands.node, [...commands.cli, 'status', '--consumer', CONSUMER], {
    cwd: commands.root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  const wallMs = performance.now() - startedAt;
  if (code !== 0 || !/phase\s+streaming/.test(output)) {
    throw new Error(`${commands.way}: status exited ${code} without a streaming consumer:\n${output}`);
  }
  return { cpuMs: reapedChildrenCpuMs() - cpuBefore, wallMs };
}

interface WorkerStart {
  /** spawn to the "worker running" line */
  startMs: number;
  /** the process's CPU at that line */
  startCpuMs: number;
  /** VmRSS after IDLE_MS of idling, and VmHWM then */
  idleRssMiB: number;
  peakRssMiB: number;
}

/** Starts one worker on a task queue of its own, measures its start and idle memory, then stops it (SIGTERM). */
async function workerStart(commands: Commands, env: Record<string, string>): Promise<WorkerStart> {
  const startedAt = performance.now();
  const child = spawn(commands.node, commands.worker, {
    cwd: commands.root,
    env: { ...process.env, ...env, TASK_QUEUE: `bench-build-idle-${randomUUID().slice(0, 8)}` },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const last: string[] = [];
  createInterface({ input: child.stderr }).on('line', (line) => void last.push(line));
  try {
    const startMs = await new Promise<number>((resolve, reject) => {
      createInterface({ input: child.stdout }).on('line', (line) => {
        if (line.includes('"worker running"')) resolve(performance.now() - startedAt);
        last.push(line);
      });
      void exited.then(() => reject(new Error(`${commands.way}: worker exited:\n${last.slice(-10).join('\n')}`)));
    });
    const startCpuMs = processCpuMs(child.pid!);
    await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
    const { rss, peak } = processRssKiB(child.pid!);
    return { startMs, startCpuMs, idleRssMiB: rss / 1024, peakRssMiB: peak / 1024 };
  } finally {
    child.kill('SIGTERM');
    const killed = setTimeout(() => child.kill('SIGKILL'), 30_000);
    await exited;
    clearTimeout(killed);
  }
}

interface WayResult {
  way: Way;
  commit: string;
  node: string;
  statusCalls: StatusCall[];
  workerStarts: WorkerStart[];
}

/** Starts the consumer through the compiled CLI (explicit from_floor, as a first start must be). */
async function startConsumer(commands: Commands, env: Record<string, string>): Promise<void> {
  const child = spawn(commands.node, [...commands.cli, 'start', '--consumer', CONSUMER, '--start', 'from_floor'], {
    cwd: commands.root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  if (code !== 0) throw new Error(`starting consumer ${CONSUMER} exited ${code}`);
}

async function waitForCommit(databaseUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    for (const deadline = Date.now() + 120_000; Date.now() < deadline;) {
      const { rows } = await client
        .query<{ position: string }>('SELECT position FROM checkpoints WHERE consumer_id = $1', [CONSUMER])
        .catch(() => ({ rows: [] }));
      if (rows.length > 0 && Number(rows[0]!.position) > 0) return;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    throw new Error(`consumer ${CONSUMER} committed nothing within 2 minutes`);
  } finally {
    await client.end();
  }
}

export async function runBuildBench(ctx: BenchContext): Promise<void> {
  const problem = buildProblem();
  if (problem) throw new Error(`the build bench measures dist/: ${problem}: run npm run build`);
  const baseline = ctx.before;
  if (!baseline) throw new Error('the build bench compares against a baseline tree: drop --no-baseline');
  const ways = WAYS.map((way) => commandsOf(way, way === 'before' ? baseline : ctx.after));
  const results: WayResult[] = ways.map((c) => ({
    way: c.way,
    commit: c.commit,
    node: execFileSync(c.node, ['--version'], { encoding: 'utf8' }).trim(),
    statusCalls: [],
    workerStarts: [],
  }));
  const start = machineState();
  const temporal = await startTemporal('build');
  const sim = await startSimulator({ transitions: 200, checkpointEvery: 5, liveRate: 2 });
  try {
    await withScratchDatabase('whalehunt_bench_build', async (databaseUrl) => {
      const env = {
        DATABASE_URL: databaseUrl,
        TEMPORAL_ADDRESS: temporal.address,
        TEMPORAL_NAMESPACE: 'default',
        WHALEHUNT_URL: sim.url,
        WHALEHUNT_API_KEY: API_KEY,
        LOG_LEVEL: 'INFO',
        TASK_QUEUE: `bench-build-${randomUUID().slice(0, 8)}`,
      };
      // The consumer every status call asks about, on a compiled worker that runs throughout.
      const compiled = ways.find((c) => c.way === 'compiled')!;
      const host = spawn(compiled.node, compiled.worker, { cwd: compiled.root, env: { ...process.env, ...env } });
      host.stdout.resume();
      host.stderr.resume();
      const hostExited = new Promise<void>((resolve) => host.once('exit', () => resolve()));
      try {
        await startConsumer(compiled, env);
        await waitForCommit(databaseUrl);
        for (let r = 0; r < ROUNDS; r++) {
          // Each way leads in turn.
          const order = [...ways.slice(r % ways.length), ...ways.slice(0, r % ways.length)];
          for (const commands of order) {
            const result = results.find((x) => x.way === commands.way)!;
            await statusCall(commands, env);
            const calls: StatusCall[] = [];
            for (let i = 0; i < STATUS_CALLS; i++) calls.push(await statusCall(commands, env));
            const worker = await workerStart(commands, env);
            result.statusCalls.push(...calls);
            result.workerStarts.push(worker);
            console.log(
              `round ${r + 1}, ${commands.way}: status ${round(median(calls.map((c) => c.cpuMs)), 0)} ms CPU; ` +
                `worker running after ${round(worker.startMs, 0)} ms (${round(worker.startCpuMs, 0)} ms CPU), ` +
                `idle RSS ${round(worker.idleRssMiB)} MiB`,
            );
          }
        }
      } finally {
        host.kill('SIGTERM');
        await hostExited;
      }
    });
  } finally {
    await stopSimulator(sim);
    await temporal.teardown();
  }
  report(results, start, machineState());
}

const MEASURES = {
  statusCpuMs: 'status: CPU of one call (ms)',
  statusWallMs: 'status: wall time of one call (ms)',
  workerStartMs: 'worker: start to "worker running" (ms)',
  workerStartCpuMs: 'worker: CPU to "worker running" (ms)',
  idleRssMiB: `worker: RSS after ${IDLE_MS / 1000} s idle (MiB)`,
  peakRssMiB: 'worker: peak RSS by then (MiB)',
} as const;
type Measure = keyof typeof MEASURES;

function report(results: WayResult[], start: MachineState, end: MachineState): void {
  const summary = results.map((r) => {
    const figures: Record<Measure, number> = {
      statusCpuMs: median(r.statusCalls.map((c) => c.cpuMs)),
      statusWallMs: median(r.statusCalls.map((c) => c.wallMs)),
      workerStartMs: median(r.workerStarts.map((w) => w.startMs)),
      workerStartCpuMs: median(r.workerStarts.map((w) => w.startCpuMs)),
      idleRssMiB: median(r.workerStarts.map((w) => w.idleRssMiB)),
      peakRssMiB: median(r.workerStarts.map((w) => w.peakRssMiB)),
    };
    return { way: r.way, commit: r.commit, node: r.node, ...figures };
  });
  const of = (way: Way) => summary.find((s) => s.way === way)!;
  const ratio = (measure: Measure) => of('compiled')[measure] / of('before')[measure];
  const verdict = (measure: Measure): string => {
    if (measure === 'statusCpuMs') return `≤ 0.25×: ${ratio(measure) <= TARGETS.statusCpu ? 'met' : 'NOT met'}`;
    if (measure === 'workerStartMs') return `≤ 0.5×: ${ratio(measure) <= TARGETS.workerStart ? 'met' : 'NOT met'}`;
    if (measure === 'idleRssMiB') return `lower: ${ratio(measure) < 1 ? 'met' : 'NOT met'}`;
    return '';
  };
  const digits = (measure: Measure) => (measure.endsWith('MiB') ? 1 : 0);
  const markdown = [
    '# The compiled build against TypeScript through tsx',
    '',
    `\`npm run bench -- build\`: ${ROUNDS} rounds, the four ways taking turns to go first; medians of ` +
      `${ROUNDS * STATUS_CALLS} status calls per way (each round's after one unmeasured call) and of ${ROUNDS} ` +
      `worker starts per way. before = ${of('before').commit} as it ran (the package bin \`node cli/bin.js\` and ` +
      `\`node --import tsx worker/main.ts\`, which bundles the workflows at start); tsx = this tree's sources ` +
      `through tsx; compiled = this tree's dist/ (\`node dist/cli/main.js\`, \`node dist/worker/main.js\` on the ` +
      `prebuilt bundle), ${of('compiled').commit}. The targets compare compiled with before, both on ` +
      `${of('compiled').node}; the last column is compiled on ${of('compiled, Node 24').node}.`,
    '',
    ...table(
      ['measure', ...WAYS, 'compiled / before', 'target'],
      (Object.keys(MEASURES) as Measure[]).map((measure) => [
        MEASURES[measure],
        ...WAYS.map((way) => round(of(way)[measure], digits(measure))),
        `${round(ratio(measure), 2)}×`,
        verdict(measure),
      ]),
    ),
    '',
    "CPU is user + system time from /proc: a status call's from the bench process's reaped-children times, a " +
      'worker\'s from its own /proc/<pid>/stat at the "worker running" line (its threads included). Every status ' +
      'call asks the same streaming consumer (a compiled worker runs it throughout); a worker measured polls a ' +
      'task queue of its own and stays idle.',
    '',
    describeMachine(start, end),
  ];
  writeResults(
    'build',
    { start, end, rounds: ROUNDS, statusCalls: STATUS_CALLS, idleMs: IDLE_MS, summary, results },
    markdown,
  );
}
