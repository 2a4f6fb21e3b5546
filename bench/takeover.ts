// Takeover after kill -9, repeated: runs the e2e scenario of test/e2e/kill-takeover.test.ts (a real worker process
// killed while it runs the streaming lease, a standby worker polling) with TAKEOVER_KILLS kills (default 20)
// and a heartbeat timeout of TAKEOVER_HEARTBEAT_TIMEOUT_MS (default 3000), and reports the time from each kill to
// the next session's connection: the 1st and the 20th must be alike (within heartbeat timeout + 3 s).
// Writes bench/results/takeover.json and takeover.md. Needs TEMPORAL_CLI like the e2e tests.
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { percentile } from './support.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const KILLS = Number(process.env.TAKEOVER_KILLS ?? 20);
const HEARTBEAT_TIMEOUT_MS = Number(process.env.TAKEOVER_HEARTBEAT_TIMEOUT_MS ?? 3_000);
const RESULTS = join(ROOT, 'bench/results/takeover.json');

interface Measured {
  kills: number;
  heartbeatTimeoutMs: number;
  takeoverMs: number[];
}

/**
 * Heartbeat RPCs per minute of one consumer: the activity heartbeats every HEARTBEAT_MS (2 s by default) and the
 * worker sends at most one every min(0.8 × heartbeat timeout, maxHeartbeatThrottleInterval 2 s).
 */
function heartbeatsPerMinute(heartbeatTimeoutMs: number, heartbeatEveryMs = 2_000): number {
  const interval = Math.max(heartbeatEveryMs, Math.min(0.8 * heartbeatTimeoutMs, 2_000));
  return Math.round((60_000 / interval) * 10) / 10;
}

export async function runTakeoverBench(): Promise<void> {
  const code = await new Promise<number | null>((resolve) => {
    const child = spawn('npx', ['vitest', 'run', 'test/e2e/kill-takeover.test.ts'], {
      cwd: ROOT,
      stdio: 'inherit',
      env: {
        ...process.env,
        TAKEOVER_KILLS: String(KILLS),
        TAKEOVER_HEARTBEAT_TIMEOUT_MS: String(HEARTBEAT_TIMEOUT_MS),
        TAKEOVER_RESULTS: RESULTS,
      },
    });
    child.once('exit', resolve);
  });
  if (code !== 0) throw new Error(`the takeover scenario failed (exit ${code})`);
  const measured = JSON.parse(readFileSync(RESULTS, 'utf8')) as Measured;
  const sorted = [...measured.takeoverMs].sort((a, b) => a - b);
  const bound = measured.heartbeatTimeoutMs + 3_000;
  const summary = {
    min: sorted[0]!,
    median: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    max: sorted.at(-1)!,
    withinBound: sorted.filter((ms) => ms <= bound).length,
  };
  writeFileSync(
    RESULTS,
    `${JSON.stringify({ ...measured, date: new Date().toISOString(), node: process.version, summary }, null, 2)}\n`,
  );
  const lines = [
    `# takeover benchmark (${new Date().toISOString()}, Node ${process.version})`,
    '',
    `${measured.kills} kill -9s of the worker process running the streaming lease while a standby worker polls (two`,
    `workers, a replacement started after each takeover); heartbeat timeout ${measured.heartbeatTimeoutMs} ms.`,
    `Takeover = kill → the next session's connection`,
    `at the reference server. Required: every takeover within heartbeat timeout + 3 s (${bound} ms).`,
    `Machine load average at the end of the run: ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')} on ${availableParallelism()} cores.`,
    '',
    '| min ms | median ms | p95 ms | max ms | within bound |',
    '| ---: | ---: | ---: | ---: | ---: |',
    `| ${summary.min} | ${summary.median} | ${summary.p95} | ${summary.max} | ${summary.withinBound}/${measured.kills} |`,
    '',
    `Per kill (1st … ${measured.kills}th): ${measured.takeoverMs.join(', ')}`,
    '',
    'Cost of the heartbeat timeout (heartbeat RPCs per minute per consumer with HEARTBEAT_MS 2 s and the worker',
    'throttle min(0.8 × timeout, 2 s)): ' +
      [3_000, 5_000, 10_000, 15_000].map((t) => `${t / 1000} s → ${heartbeatsPerMinute(t)}/min`).join(', ') +
      '.',
    '',
  ];
  writeFileSync(join(ROOT, 'bench/results/takeover.md'), lines.join('\n'));
  console.log(lines.join('\n'));
}
