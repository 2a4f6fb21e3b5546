// Takeover with the production defaults (issue 18): runs test/e2e/takeover.test.ts with TAKEOVER_PLAN (default 20
// kill -9s, 10 freezes between commits, 10 freezes inside a commit; a standby worker polls all along) and reports,
// per kind, the time from the stop to the standby's first commit: min/median/p95/max, how many are within the
// heartbeat timeout + 5 s, and the first half against the second (nothing may degrade with repetition). Then the
// price of the short heartbeat timeout: worker and Temporal server CPU while 20 consumers idle at the head, with
// today's heartbeat settings against the old ones (HEARTBEAT_MS 2 s, heartbeat timeout 15 s), in the same run.
// Writes bench/results/takeover.json and takeover.md. Needs TEMPORAL_CLI like the e2e tests.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_HEARTBEAT_TIMEOUT_MS } from '../workflows/definitions.js';
import { startSimulator, stopSimulator } from './simulator-process.js';
import {
  currentTarget,
  describeMachine,
  machineState,
  median,
  percentile,
  ROOT,
  round,
  table,
  writeResults,
} from './support.js';
import { bundleWorkflows, idleLeaseCost, startTemporal, type IdleLeaseCost } from './temporal-env.js';

const PLAN = process.env.TAKEOVER_PLAN ?? 'kill:20,freeze:10,freeze-in-commit:10';
const IDLE_CONSUMERS = Number(process.env.TAKEOVER_IDLE_CONSUMERS ?? 20);
const IDLE_WINDOW_MS = Number(process.env.TAKEOVER_IDLE_WINDOW_MS ?? 30_000);
/** Every takeover must commit within this long of the stop. */
const BOUND_MS = DEFAULT_HEARTBEAT_TIMEOUT_MS + 5_000;

interface Sample {
  kind: string;
  takeoverMs: number;
  leaseMs: number;
  attempts: { atMs: number; attempt: number; pid: number; onStopped: boolean }[];
}

export async function runTakeoverBench(): Promise<void> {
  const start = machineState();
  const samples = await runScenario();
  const afterScenario = machineState();
  const cost = await heartbeatCost();
  const end = machineState();

  const kinds = [...new Set(samples.map((s) => s.kind))];
  const rows = kinds.map((kind) => {
    const times = samples.filter((s) => s.kind === kind).map((s) => s.takeoverMs);
    const sorted = [...times].sort((a, b) => a - b);
    const half = Math.floor(times.length / 2);
    return {
      kind,
      count: times.length,
      min: sorted[0]!,
      median: median(times),
      p95: percentile(sorted, 95),
      max: sorted.at(-1)!,
      withinBound: times.filter((ms) => ms <= BOUND_MS).length,
      // Where the time goes: retries the stopped worker's open poll took, and when the standby's attempt started.
      swallowed: samples
        .filter((s) => s.kind === kind)
        .reduce((n, s) => n + s.attempts.filter((a, i) => i > 0 && a.onStopped).length, 0),
      standbyStartMedian: median(
        samples.filter((s) => s.kind === kind).map((s) => s.attempts.find((a) => !a.onStopped)?.atMs ?? s.leaseMs),
      ),
      firstHalfMedian: half > 0 ? median(times.slice(0, half)) : null,
      secondHalfMedian: half > 0 ? median(times.slice(half)) : null,
      times,
    };
  });
  const markdown = [
    `# takeover benchmark (${end.at})`,
    '',
    `${describeMachine(start, end)} Load at the end of the takeover scenario: ${afterScenario.loadavg.join(' ')}.`,
    '',
    `Plan \`${PLAN}\`, production defaults: heartbeat timeout ${DEFAULT_HEARTBEAT_TIMEOUT_MS} ms, HEARTBEAT_MS 1 s,`,
    'the lease on its own task queue with one poller per worker, a timed-out lease retried by the server at once.',
    'Two worker processes (a replacement starts after each stop). Takeover = stop → the standby\u2019s first commit',
    `(the checkpoint row at the standby\u2019s lease epoch, polled every 25 ms). Required: each within heartbeat timeout`,
    `+ 5 s (${BOUND_MS} ms); kill -9 median ≤ 8 s.`,
    '',
    ...table(
      ['stop', 'n', 'min ms', 'median ms', 'p95 ms', 'max ms', 'within bound', '1st half median', '2nd half median'],
      rows.map((r) => [
        r.kind,
        r.count,
        r.min,
        r.median,
        r.p95,
        r.max,
        `${r.withinBound}/${r.count}`,
        r.firstHalfMedian ?? '–',
        r.secondHalfMedian ?? '–',
      ]),
    ),
    '',
    ...rows.map((r) => `- ${r.kind}, in order: ${r.times.join(', ')}`),
    '',
    'Where the time goes (from the workflow\u2019s pending activity, polled every 100 ms):',
    '',
    ...table(
      [
        'stop',
        'retries taken by the stopped worker',
        'standby attempt started, median ms',
        'then first commit, median ms',
      ],
      rows.map((r) => [
        r.kind,
        `${r.swallowed} in ${r.count} stops`,
        r.standbyStartMedian,
        r.median - r.standbyStartMedian,
      ]),
    ),
    '',
    `## The price of the heartbeat settings`,
    '',
    `${IDLE_CONSUMERS} consumers idle at the head on one worker for ${IDLE_WINDOW_MS / 1000} s; CPU of the worker`,
    'process and of the Temporal dev server over that window (from /proc), each setting in the same run.',
    '',
    ...table(
      ['setting', 'heartbeat RPCs/min per consumer', 'worker CPU ms/s', 'Temporal server CPU ms/s'],
      cost.map((c) => [
        c.label,
        round(60_000 / c.heartbeatEveryMs),
        round(c.workerCpuMsPerS, 2),
        round(c.serverCpuMsPerS, 2),
      ]),
    ),
    '',
  ];
  writeResults(
    'takeover',
    { plan: PLAN, boundMs: BOUND_MS, machine: { start, afterScenario, end }, rows, cost },
    markdown,
  );
}

async function runScenario(): Promise<Sample[]> {
  const dir = mkdtempSync(join(tmpdir(), 'whalehunt-takeover-'));
  const results = join(dir, 'samples.json');
  try {
    const code = await new Promise<number | null>((resolve) => {
      const child = spawn('npx', ['vitest', 'run', 'test/e2e/takeover.test.ts'], {
        cwd: ROOT,
        stdio: 'inherit',
        env: { ...process.env, TAKEOVER_PLAN: PLAN, TAKEOVER_RESULTS: results },
      });
      child.once('exit', resolve);
    });
    if (code !== 0) throw new Error(`the takeover scenario failed (exit ${code})`);
    return (JSON.parse(readFileSync(results, 'utf8')) as { samples: Sample[] }).samples;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function heartbeatCost(): Promise<(IdleLeaseCost & { label: string; heartbeatEveryMs: number })[]> {
  const env = await startTemporal('takeover');
  const sim = await startSimulator({ transitions: 50, checkpointEvery: 5 });
  const dir = mkdtempSync(join(tmpdir(), 'whalehunt-takeover-bundle-'));
  try {
    const target = currentTarget();
    const bundlePath = await bundleWorkflows(target, dir);
    const settings = [
      {
        label: `today: HEARTBEAT_MS 1000, timeout ${DEFAULT_HEARTBEAT_TIMEOUT_MS} ms`,
        heartbeatEveryMs: 1_000,
        heartbeatTimeoutMs: DEFAULT_HEARTBEAT_TIMEOUT_MS,
      },
      { label: 'before: HEARTBEAT_MS 2000, timeout 15000 ms', heartbeatEveryMs: 2_000, heartbeatTimeoutMs: 15_000 },
    ];
    const measured = [];
    for (const setting of settings) {
      const cost = await idleLeaseCost({
        env,
        target,
        bundlePath,
        sim,
        consumers: IDLE_CONSUMERS,
        windowMs: IDLE_WINDOW_MS,
        heartbeatEveryMs: setting.heartbeatEveryMs,
        heartbeatTimeoutMs: setting.heartbeatTimeoutMs,
      });
      measured.push({ ...setting, ...cost });
    }
    return measured;
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await stopSimulator(sim);
    await env.teardown();
  }
}
