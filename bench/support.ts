// What the benchmarks share: scratch databases, the machine's state, the baseline tree a run compares against,
// percentiles and the results directory.
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { loadConfig } from '../worker/config.js';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** BENCH_RESULTS_DIR sends a short validation run's results elsewhere, leaving the committed ones alone. */
export const RESULTS = process.env.BENCH_RESULTS_DIR ?? join(ROOT, 'bench/results');
/** The worker's default staging limits (STAGING_MAX_*): staging as a deployed consumer stages. */
export const WORKER_STAGING = loadConfig({
  DATABASE_URL: 'postgres://bench',
  WHALEHUNT_URL: 'ws://bench',
  WHALEHUNT_API_KEY: 'bench',
}).stream.staging;

/** Today's main: what `--baseline` compares against unless told otherwise. */
export const DEFAULT_BASELINE_REF = 'dc9f4f4';

/**
 * A database name no other run uses: the pid and random bytes, so two runs at once (or a leftover of a crashed
 * one) never DROP … FORCE each other's database.
 */
export function scratchDatabaseName(prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

/** The server the benches' scratch databases are created on. */
export const ADMIN_DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** Creates a database of its own for `fn` (named after `prefix`), runs `fn` with its URL, then drops it. */
export async function withScratchDatabase<T>(prefix: string, fn: (url: string) => Promise<T>): Promise<T> {
  const adminUrl = ADMIN_DATABASE_URL;
  const name = scratchDatabaseName(prefix);
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
    const url = new URL(adminUrl);
    url.pathname = `/${name}`;
    try {
      return await fn(url.toString());
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    }
  } finally {
    await admin.end();
  }
}

/** The nearest-rank percentile `p` (0..100] of ascending `sorted`. */
export function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

export function median(values: number[]): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    50,
  );
}

export const round = (n: number, digits = 1): number => Math.round(n * 10 ** digits) / 10 ** digits;

/** What the machine was doing: a shared 2-core box skews every figure, so each result carries this. */
export interface MachineState {
  at: string;
  node: string;
  cores: number;
  cpuModel: string;
  memoryGb: number;
  /** 1, 5 and 15 minute load averages (what `uptime` prints) */
  loadavg: number[];
  uptime: string;
}

export function machineState(): MachineState {
  let uptime = '';
  try {
    uptime = execFileSync('uptime', { encoding: 'utf8' }).trim();
  } catch {
    uptime = 'uptime(1) unavailable';
  }
  return {
    at: new Date().toISOString(),
    node: process.version,
    cores: availableParallelism(),
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryGb: round(totalmem() / 2 ** 30),
    loadavg: loadavg().map((l) => round(l, 2)),
    uptime,
  };
}

export function describeMachine(start: MachineState, end: MachineState): string {
  return (
    `Node ${end.node} on ${end.cores} cores (${end.cpuModel}). Load averages (1/5/15 min) at the start ` +
    `${start.loadavg.join(' ')}, at the end ${end.loadavg.join(' ')}.`
  );
}

/** A tree a bench loads its measured target from: this checkout ("after") or a baseline ref ("before"). */
export interface Target {
  label: 'after' | 'before';
  root: string;
  /** the commit the tree is at */
  commit: string;
}

/** Imports `relative` (e.g. 'protocol/codec.ts') from the target's tree. */
export async function importFrom<T>(target: Target, relative: string): Promise<T> {
  return (await import(pathToFileURL(join(target.root, relative)).href)) as T;
}

function git(args: string[], cwd = ROOT): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
}

export function currentTarget(): Target {
  let commit = git(['rev-parse', '--short', 'HEAD']);
  if (git(['status', '--porcelain', '--untracked-files=no']) !== '') commit += '+uncommitted';
  return { label: 'after', root: ROOT, commit };
}

/**
 * Checks `ref` out into a temporary git worktree with this checkout's node_modules linked in, so that the same
 * bench code can load the baseline's measured target in the same run. `dispose` removes the worktree.
 */
export function checkoutBaseline(ref: string): Target & { dispose: () => void } {
  const commit = git(['rev-parse', '--short', `${ref}^{commit}`]);
  const root = join(mkdtempSync(join(tmpdir(), `whalehunt-bench-${commit}-`)), 'tree');
  git(['worktree', 'add', '--detach', root, commit]);
  symlinkSync(realpathSync(join(ROOT, 'node_modules')), join(root, 'node_modules'));
  return {
    label: 'before',
    root,
    commit,
    dispose: () => {
      git(['worktree', 'remove', '--force', root]);
      rmSync(dirname(root), { recursive: true, force: true });
    },
  };
}

/** `--baseline <ref>` (default `fallback`, DEFAULT_BASELINE_REF unless a bench has its own) or `--no-baseline`. */
export function baselineRef(args: readonly string[], fallback = DEFAULT_BASELINE_REF): string | null {
  if (args.includes('--no-baseline')) return null;
  const at = args.indexOf('--baseline');
  if (at < 0) return fallback;
  const ref = args[at + 1];
  if (!ref || ref.startsWith('--')) throw new Error('--baseline needs a git ref');
  return ref;
}

/** What a bench is given: the targets to measure (after, and before when a baseline is checked out). */
export interface BenchContext {
  after: Target;
  before: Target | null;
  args: readonly string[];
}

/** The targets in alternating order: round 0 measures after first, round 1 before first, and so on. */
export function interleaved(ctx: BenchContext, roundIndex: number): Target[] {
  const both = ctx.before ? [ctx.after, ctx.before] : [ctx.after];
  return roundIndex % 2 === 0 ? both : both.reverse();
}

/** Writes bench/results/<name>.json and <name>.md and prints the markdown. */
export function writeResults(name: string, json: object, markdown: string[]): void {
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, `${name}.json`), `${JSON.stringify(json, null, 2)}\n`);
  writeFileSync(join(RESULTS, `${name}.md`), `${markdown.join('\n')}\n`);
  console.log(markdown.join('\n'));
}

export function resultExists(name: string): boolean {
  return existsSync(join(RESULTS, `${name}.json`));
}

/** A markdown table from a header and rows. */
export function table(header: string[], rows: (string | number)[][]): string[] {
  return [
    `| ${header.join(' | ')} |`,
    `| ${header.map((_, i) => (i === 0 ? '---' : '---:')).join(' | ')} |`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ];
}

/** The lines a bench process prints at the edges of its timed window (TIMED_START followed by its database). */
export const TIMED_START = 'bench:timed-start';
export const TIMED_END = 'bench:timed-end';

/**
 * Ends a bench process's timed window: prints TIMED_END and waits until the parent has sampled the other processes
 * (runBenchProcess answers on stdin), so that the run's Postgres backends are still connected when it does.
 */
export async function endTimedWindow(): Promise<void> {
  const sampled = new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
  process.stdout.write(`${TIMED_END}\n`);
  await sampled;
  process.stdin.destroy();
}

/** BENCH_CPU_PROF=<dir>: each measured process writes a V8 CPU profile there (investigating, never in a result). */
export function cpuProfileArgs(): string[] {
  return process.env.BENCH_CPU_PROF ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_CPU_PROF] : [];
}

/**
 * Runs `bench/<script>` in a process of its own (its CPU time and peak RSS are its alone) with `env` added, and
 * resolves with the JSON of the last line it prints. `onLine` sees every line as it arrives: a run marks the
 * edges of its timed window on stdout, so that the parent can sample other processes there.
 */
export function runBenchProcess<T>(
  script: string,
  what: string,
  env: Record<string, string>,
  onLine?: (line: string) => void,
): Promise<T> {
  const child = spawn(process.execPath, [...cpuProfileArgs(), '--import', 'tsx', join(ROOT, 'bench', script)], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, ...env },
  });
  // A process that exits without reading its go-ahead closes the pipe under the write: nothing to report.
  child.stdin.on('error', () => undefined);
  let last = '';
  const lines = createInterface({ input: child.stdout });
  lines.on('line', (line) => {
    if (line.trim() !== '') last = line;
    onLine?.(line);
    // onLine has sampled what it samples at the end of the window: the run may now close its connections.
    if (line === TIMED_END) child.stdin.write('\n');
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  const read = new Promise<void>((resolve) => lines.once('close', resolve));
  return Promise.all([exited, read]).then(([code]) => {
    if (code !== 0 || !last) throw new Error(`${what} exited with ${code}`);
    return JSON.parse(last) as T;
  });
}
