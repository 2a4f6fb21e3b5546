// Whale alert delivery: how long after its commit an alert reaches the webhook, and how many alerts a second
// one dispatcher delivers from a backlog, for this tree's OutboxDispatcher and the baseline's (by default
// ALERTS_BASELINE_REF, the dispatcher before NOTIFY wake-ups, concurrent POSTs and batched completions).
//
// Each tree runs against a scratch database of its own, migrated by that tree's migrate, with its dispatcher in
// a process of its own (bench/alerts-run.ts, the tree's modules only). This process holds the two ends of the
// measured path on one clock: an "alert writer" that inserts pending outbox rows as a commit does (one INSERT
// statement per commit, autocommit, the same SQL for both trees; the commit time is taken when the statement
// returns, after its transaction committed) and a local HTTP receiver (keep-alive, 200 at once) that records when
// each Idempotency-Key arrives. Delay = arrival − commit, per alert. Paced scenarios (1, 100 and 1,000 alerts/s)
// run against a started dispatcher; then "sustained": SUSTAINED_ROWS pending rows are inserted with the
// dispatcher stopped, a new one is started, and the clock runs until the receiver has them all. The trees
// alternate over up to BENCH_ALERTS_ROUNDS rounds (the order flipping per round) within BENCH_ALERTS_BUDGET_S. The
// dispatcher's and Postgres's CPU are read from /proc at the edges of every scenario. Every key must arrive exactly
// once; missing and duplicate keys are counted. Targets: p99 delay ≤ 250 ms at 100 alerts/s (the absolute
// figure, shown with its ratio to the baseline's p99 in the same run) and sustained alerts/s ≥ 10× the baseline's.
// Writes bench/results/alerts.json and alerts.md.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { AlertsRunResult } from './alerts-run.js';
import {
  backendsCpuMs,
  describePostgresCpu,
  postgresCpu,
  processCpuMs,
  type PostgresCpu,
  type PostgresCpuSample,
} from './proc-cpu.js';
import {
  ADMIN_DATABASE_URL,
  ROOT,
  describeMachine,
  interleaved,
  machineState,
  median,
  percentile,
  round,
  table,
  withScratchDatabase,
  writeResults,
  type BenchContext,
  type Target,
} from './support.js';

/** The dispatcher before this change: polls every second, 20 rows per round, one POST and one UPDATE at a time. */
export const ALERTS_BASELINE_REF = '294ddf4';

/** Rounds at most; a round starts only if, at the last round's pace, it ends within BUDGET_S of the start. */
const ROUNDS = Number(process.env.BENCH_ALERTS_ROUNDS ?? 2);
const BUDGET_S = Number(process.env.BENCH_ALERTS_BUDGET_S ?? 300);
/** Rows of the sustained scenario (0 skips it). */
const SUSTAINED_ROWS = Number(process.env.BENCH_ALERTS_SUSTAINED ?? 20_000);
const SUSTAINED_PER_STATEMENT = 1_000;
/** The new dispatcher's `concurrency` (its default when unset); investigation only. */
const CONCURRENCY = process.env.BENCH_ALERTS_CONCURRENCY;
/** How long a scenario may take to deliver everything after its last commit before keys count as missing. */
const DRAIN_TIMEOUT_MS = Number(process.env.BENCH_ALERTS_DRAIN_TIMEOUT_MS ?? 120_000);
/** The writer's connections: commits may overlap when one is slow, as several consumers' do. */
const WRITER_CONNECTIONS = 4;
/** After a dispatcher starts, before a paced scenario: its LISTEN connection (if any) is up. */
const SETTLE_MS = 500;
/**
 * A run with an investigation knob (a narrower or altered run) writes bench/results/alerts-investigation.* instead
 * of the results: only the default run is the record.
 */
const INVESTIGATING = [
  'BENCH_ALERTS_CONCURRENCY',
  'BENCH_ALERTS_RATES',
  'BENCH_ALERTS_SUSTAINED',
  'BENCH_ALERTS_CPU_PROF',
].some((name) => process.env[name] !== undefined);
const CONSUMER_ID = 'bench-alerts';

export interface PacedScenario {
  /** alerts per second */
  rate: number;
  rowsPerCommit: number;
  everyMs: number;
  commits: number;
}

/** BENCH_ALERTS_RATES=100 narrows a run while investigating. */
const PACED: PacedScenario[] = [
  { rate: 1, rowsPerCommit: 1, everyMs: 1000, commits: 20 },
  { rate: 100, rowsPerCommit: 1, everyMs: 10, commits: 1000 },
  { rate: 1000, rowsPerCommit: 10, everyMs: 10, commits: 500 },
].filter((s) => !process.env.BENCH_ALERTS_RATES || process.env.BENCH_ALERTS_RATES.split(',').includes(String(s.rate)));

// ---------------------------------------------------------------------------------------------------------------
// The receiver

interface Arrival {
  at: number;
  signed: boolean;
}

/** The webhook: records the first arrival of every Idempotency-Key and counts the repeats. */
class Receiver {
  readonly arrivals = new Map<string, Arrival>();
  readonly repeats = new Map<string, number>();
  /** requests without an Idempotency-Key */
  keyless = 0;
  private waiting: { keys: Set<string>; done: () => void } | null = null;
  private readonly server = createServer({ keepAlive: true }, (req, res) => this.handle(req, res));
  url = '';

  async listen(): Promise<void> {
    this.server.keepAliveTimeout = 65_000;
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/whale-alerts`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const at = performance.now();
    const key = req.headers['idempotency-key'];
    if (typeof key !== 'string') this.keyless += 1;
    else if (this.arrivals.has(key)) this.repeats.set(key, (this.repeats.get(key) ?? 0) + 1);
    else {
      this.arrivals.set(key, { at, signed: typeof req.headers['webhook-signature'] === 'string' });
      if (this.waiting?.keys.delete(key) && this.waiting.keys.size === 0) this.waiting.done();
    }
    req.resume();
    req.once('end', () => res.writeHead(200, { 'content-length': '0' }).end());
  }

  /** Resolves true when every key has arrived, false after timeoutMs. */
  async waitFor(keys: readonly string[], timeoutMs: number): Promise<boolean> {
    const pending = new Set(keys.filter((k) => !this.arrivals.has(k)));
    if (pending.size === 0) return true;
    let timer: NodeJS.Timeout | undefined;
    const all = new Promise<boolean>((resolve) => (this.waiting = { keys: pending, done: () => resolve(true) }));
    const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    try {
      return await Promise.race([all, late]);
    } finally {
      clearTimeout(timer);
      this.waiting = null;
    }
  }

  /** Of `keys`: how many never arrived, how many extra deliveries, how many arrived unsigned. */
  check(keys: readonly string[]): { missing: number; duplicates: number; unsigned: number } {
    let missing = 0;
    let duplicates = 0;
    let unsigned = 0;
    for (const key of keys) {
      const arrival = this.arrivals.get(key);
      if (!arrival) missing += 1;
      else if (!arrival.signed) unsigned += 1;
      duplicates += this.repeats.get(key) ?? 0;
    }
    return { missing, duplicates, unsigned };
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The alert writer

interface Alerts {
  keys: string[];
  eventIds: string[];
  payloads: string[];
}

const hex = (bytes: number) => randomBytes(bytes).toString('hex');

/** `n` new alerts, keyed whale_alert:<unique id>, with payloads shaped like domain/decide.ts alertPayload's. */
function newAlerts(prefix: string, n: number): Alerts {
  const alerts: Alerts = { keys: [], eventIds: [], payloads: [] };
  const market = `0x${hex(32)}`;
  for (let i = 0; i < n; i++) {
    const eventId = `${prefix}-${i}-${hex(4)}`;
    alerts.eventIds.push(eventId);
    alerts.keys.push(`whale_alert:${eventId}`);
    alerts.payloads.push(
      JSON.stringify({
        kind: 'trade',
        position: 1_000_000 + i,
        delivery: 'live',
        observedAt: new Date().toISOString(),
        entityId: `exec-${hex(8)}`,
        revision: 1,
        market,
        asset: '71321045679252212594626385532706912750332728571942532289631379312455583992563',
        side: 'BUY',
        price: '0.6125',
        size: '250000',
        notional: '153125.0000',
        wallet: `0x${hex(20)}`,
        txHash: `0x${hex(32)}`,
        eventId,
      }),
    );
  }
  return alerts;
}

/** The same statement for both trees: the columns both schemas have, defaults for the rest (status pending). */
const INSERT_ALERTS = `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload)
  SELECT $1, k, e, 'whale_alert', p::jsonb FROM unnest($2::text[], $3::text[], $4::text[]) AS t(k, e, p)`;

/** Commits alerts [from, to) in one INSERT (autocommit); resolves with the time right after it returned. */
async function commitAlerts(writer: pg.Pool, alerts: Alerts, from: number, to: number): Promise<number> {
  await writer.query({
    name: 'bench_alerts_insert',
    text: INSERT_ALERTS,
    values: [
      CONSUMER_ID,
      alerts.keys.slice(from, to),
      alerts.eventIds.slice(from, to),
      alerts.payloads.slice(from, to),
    ],
  });
  return performance.now();
}

// ---------------------------------------------------------------------------------------------------------------
// A tree's dispatcher process

interface DispatcherProcess {
  pid: number;
  /** sends `command` and waits for the line `answer` */
  command(command: 'start' | 'stop', answer: 'started' | 'stopped'): Promise<void>;
  /** sends exit and resolves with the process's last line */
  exit(): Promise<AlertsRunResult>;
  kill(): void;
  ready: Promise<void>;
}

function spawnDispatcher(target: Target, dbUrl: string, webhookUrl: string): DispatcherProcess {
  // tsx and the tree's modules from the tree (its node_modules is this checkout's, linked in).
  // BENCH_ALERTS_CPU_PROF=<dir> writes a V8 CPU profile of each dispatcher process there (investigation only).
  const profile = process.env.BENCH_ALERTS_CPU_PROF;
  const flags = profile ? ['--cpu-prof', `--cpu-prof-dir=${profile}`] : [];
  const child = spawn(process.execPath, [...flags, '--import', 'tsx', join(ROOT, 'bench/alerts-run.ts')], {
    cwd: target.root,
    stdio: ['pipe', 'pipe', 'inherit'],
    env: {
      ...process.env,
      BENCH_TARGET_ROOT: target.root,
      BENCH_DB_URL: dbUrl,
      BENCH_WEBHOOK_URL: webhookUrl,
      BENCH_LABEL: target.label,
      ...(CONCURRENCY ? { BENCH_ALERTS_CONCURRENCY: CONCURRENCY } : {}),
    },
  });
  const what = `alerts dispatcher (${target.label})`;
  let last = '';
  const waiters: { line: string; resolve: () => void }[] = [];
  const lines = createInterface({ input: child.stdout });
  lines.on('line', (line) => {
    if (line.trim() !== '') last = line;
    if (waiters[0]?.line === line) waiters.shift()!.resolve();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  const closed = new Promise<void>((resolve) => lines.once('close', resolve));
  const expect = (line: string) =>
    Promise.race([
      new Promise<void>((resolve) => waiters.push({ line, resolve })),
      exited.then((code) => Promise.reject(new Error(`${what} exited with ${code} before '${line}'`))),
    ]);
  return {
    pid: child.pid!,
    ready: expect('ready'),
    command: (command, answer) => {
      const answered = expect(answer);
      child.stdin.write(`${command}\n`);
      return answered;
    },
    exit: async () => {
      child.stdin.end('exit\n');
      const [code] = await Promise.all([exited, closed]);
      if (code !== 0 || !last) throw new Error(`${what} exited with ${code}`);
      return JSON.parse(last) as AlertsRunResult;
    },
    kill: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Scenarios

interface CpuSample {
  dispatcherMs: number;
  /** this process's (the writer's and the receiver's) */
  benchMs: number;
  postgres: PostgresCpuSample | null;
}

interface Cost {
  /** the dispatcher process's user+system CPU over the scenario (first commit or start to the last row done) */
  dispatcherCpuMs: number;
  /** this process's: the writer and the receiver, over the same window */
  benchCpuMs: number;
  /** the whole Postgres server's over the same window (the writer's INSERTs included); null without /proc */
  postgresCpuMs: number | null;
  /** of which the scratch database's backends (the writer's and the dispatcher's) */
  postgresBackendsCpuMs: number | null;
}

export interface PacedRun extends Cost {
  rate: number;
  alerts: number;
  /** the writer's commits per second, as achieved: (alerts − one commit's) / (last commit − first commit) */
  committedPerSecond: number;
  /** (alerts − 1) / (last arrival − first arrival) */
  deliveredPerSecond: number;
  minMs: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** which alert (in commit order, from 0) waited longest: the last one is left to the poll when its wake-up is lost */
  maxIndex: number;
  missing: number;
  duplicates: number;
  unsigned: number;
}

export interface SustainedRun extends Cost {
  alerts: number;
  /** from the start command to the last arrival */
  wallMs: number;
  alertsPerSecond: number;
  missing: number;
  duplicates: number;
  unsigned: number;
}

export interface TreeRun {
  target: Target['label'];
  commit: string;
  round: number;
  paced: PacedRun[];
  sustained: SustainedRun | null;
  /** rows not 'done' at the end, and rows claimed more than once (a lease ran out or a claim was given back) */
  notDone: number;
  reclaimed: number;
  dispatcher: AlertsRunResult;
}

interface TreeSession {
  writer: pg.Pool;
  receiver: Receiver;
  dispatcher: DispatcherProcess;
  sample(): CpuSample;
  /** delays of every paced run, ms, by rate */
  delays: Map<number, number[]>;
}

function cost(start: CpuSample, end: CpuSample): Cost {
  const delta = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? null : b - a);
  return {
    dispatcherCpuMs: end.dispatcherMs - start.dispatcherMs,
    benchCpuMs: end.benchMs - start.benchMs,
    postgresCpuMs: delta(start.postgres?.serverMs, end.postgres?.serverMs),
    postgresBackendsCpuMs: backendsCpuMs(start.postgres, end.postgres),
  };
}

/** Until no row is pending or claimed (the dispatcher recorded its last completion). */
async function allDone(writer: pg.Pool): Promise<void> {
  const deadline = performance.now() + DRAIN_TIMEOUT_MS;
  while (performance.now() < deadline) {
    const res = await writer.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM outbox WHERE status IN ('pending', 'claimed')`,
    );
    if (res.rows[0]!.n === 0) return;
    await sleep(20);
  }
  console.error('alerts bench: rows still pending or claimed after the drain timeout');
}

async function pacedRun(session: TreeSession, scenario: PacedScenario, prefix: string): Promise<PacedRun> {
  const { writer, receiver } = session;
  const n = scenario.commits * scenario.rowsPerCommit;
  const alerts = newAlerts(`${prefix}-r${scenario.rate}`, n);
  const committedAt = new Array<number>(n);
  const commits: Promise<void>[] = [];
  const start = session.sample();
  const t0 = performance.now();
  for (let c = 0; c < scenario.commits; c++) {
    await sleep(Math.max(0, t0 + c * scenario.everyMs - performance.now()));
    const from = c * scenario.rowsPerCommit;
    const to = from + scenario.rowsPerCommit;
    commits.push(
      commitAlerts(writer, alerts, from, to).then((at) => {
        for (let i = from; i < to; i++) committedAt[i] = at;
      }),
    );
  }
  await Promise.all(commits);
  await receiver.waitFor(alerts.keys, DRAIN_TIMEOUT_MS);
  await allDone(writer);
  const end = session.sample();

  const delays: number[] = [];
  const arrivals: number[] = [];
  let maxIndex = -1;
  let maxDelay = -Infinity;
  alerts.keys.forEach((key, i) => {
    const arrival = receiver.arrivals.get(key);
    if (!arrival) return;
    const delay = arrival.at - committedAt[i]!;
    if (delay > maxDelay) [maxIndex, maxDelay] = [i, delay];
    delays.push(delay);
    arrivals.push(arrival.at);
  });
  session.delays.set(scenario.rate, [...(session.delays.get(scenario.rate) ?? []), ...delays]);
  const sorted = [...delays].sort((a, b) => a - b);
  const commitTimes = [...committedAt].sort((a, b) => a - b);
  const firstArrival = Math.min(...arrivals);
  const lastArrival = Math.max(...arrivals);
  const run: PacedRun = {
    rate: scenario.rate,
    alerts: n,
    committedPerSecond: round((n - scenario.rowsPerCommit) / ((commitTimes.at(-1)! - commitTimes[0]!) / 1000) || 0, 1),
    deliveredPerSecond: round((arrivals.length - 1) / ((lastArrival - firstArrival) / 1000) || 0, 1),
    minMs: round(sorted[0] ?? NaN, 2),
    p50Ms: round(sorted.length ? percentile(sorted, 50) : NaN, 2),
    p99Ms: round(sorted.length ? percentile(sorted, 99) : NaN, 2),
    maxMs: round(sorted.at(-1) ?? NaN, 2),
    maxIndex,
    ...receiver.check(alerts.keys),
    ...cost(start, end),
  };
  return run;
}

async function sustainedRun(session: TreeSession, prefix: string): Promise<SustainedRun> {
  const { writer, receiver, dispatcher } = session;
  await dispatcher.command('stop', 'stopped');
  const alerts = newAlerts(`${prefix}-sustained`, SUSTAINED_ROWS);
  for (let from = 0; from < SUSTAINED_ROWS; from += SUSTAINED_PER_STATEMENT) {
    await commitAlerts(writer, alerts, from, Math.min(SUSTAINED_ROWS, from + SUSTAINED_PER_STATEMENT));
  }
  const start = session.sample();
  const t = performance.now();
  await dispatcher.command('start', 'started');
  await receiver.waitFor(alerts.keys, DRAIN_TIMEOUT_MS);
  let last = t;
  for (const key of alerts.keys) last = Math.max(last, receiver.arrivals.get(key)?.at ?? t);
  await allDone(writer);
  const end = session.sample();
  const check = receiver.check(alerts.keys);
  const wallMs = last - t;
  return {
    alerts: SUSTAINED_ROWS,
    wallMs: Math.round(wallMs),
    alertsPerSecond: Math.round((SUSTAINED_ROWS - check.missing) / (wallMs / 1000)),
    ...check,
    ...cost(start, end),
  };
}

async function treeRun(
  target: Target,
  roundIndex: number,
  receiver: Receiver,
  postgres: PostgresCpu,
  delays: Map<number, number[]>,
): Promise<TreeRun> {
  return withScratchDatabase(`whalehunt_bench_alerts_${target.label}`, async (dbUrl) => {
    const database = new URL(dbUrl).pathname.slice(1);
    const dispatcher = spawnDispatcher(target, dbUrl, receiver.url);
    const writer = new pg.Pool({ connectionString: dbUrl, max: WRITER_CONNECTIONS });
    writer.on('error', () => undefined);
    try {
      await dispatcher.ready; // migrated by the tree's own migrate
      const session: TreeSession = {
        writer,
        receiver,
        dispatcher,
        delays,
        sample: () => ({
          dispatcherMs: processCpuMs(dispatcher.pid),
          benchMs: processCpuMs(process.pid),
          postgres: postgres.available ? postgres.sample(database) : null,
        }),
      };
      const prefix = `${target.label}-${roundIndex}-${hex(3)}`;
      await dispatcher.command('start', 'started');
      await sleep(SETTLE_MS);
      const paced: PacedRun[] = [];
      for (const scenario of PACED) {
        const run = await pacedRun(session, scenario, prefix);
        paced.push(run);
        console.log(
          `alerts ${target.label} (${target.commit}) round ${roundIndex} ${scenario.rate}/s: ` +
            `delay p50 ${run.p50Ms} p99 ${run.p99Ms} max ${run.maxMs} ms, committed ${run.committedPerSecond}/s, ` +
            `delivered ${run.deliveredPerSecond}/s, slowest alert #${run.maxIndex} of ${run.alerts}, ` +
            `dispatcher ${round((run.dispatcherCpuMs * 1000) / run.alerts)} µs/alert, ` +
            `missing ${run.missing}, duplicates ${run.duplicates}`,
        );
      }
      const sustained = SUSTAINED_ROWS > 0 ? await sustainedRun(session, prefix) : null;
      if (sustained) {
        console.log(
          `alerts ${target.label} (${target.commit}) round ${roundIndex} sustained: ${sustained.alerts} in ` +
            `${sustained.wallMs} ms = ${sustained.alertsPerSecond}/s, dispatcher ` +
            `${round((sustained.dispatcherCpuMs * 1000) / sustained.alerts)} µs/alert, missing ${sustained.missing}, ` +
            `duplicates ${sustained.duplicates}`,
        );
      }
      const result = await dispatcher.exit();
      const check = await writer.query<{ not_done: number; reclaimed: number }>(
        `SELECT count(*) FILTER (WHERE status <> 'done')::int AS not_done,
                count(*) FILTER (WHERE attempts <> 1)::int AS reclaimed FROM outbox`,
      );
      return {
        target: target.label,
        commit: target.commit,
        round: roundIndex,
        paced,
        sustained,
        notDone: check.rows[0]!.not_done,
        reclaimed: check.rows[0]!.reclaimed,
        dispatcher: result,
      };
    } finally {
      dispatcher.kill();
      await writer.end();
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Rows and results

export interface AlertsPacedRow {
  rate: number;
  target: Target['label'];
  commit: string;
  runs: number;
  alerts: number;
  /** percentiles over the delays of every run */
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** medians over the runs */
  committedPerSecond: number;
  deliveredPerSecond: number;
  dispatcherCpuUsPerAlert: number;
  benchCpuUsPerAlert: number;
  postgresCpuUsPerAlert: number | null;
  /** the scratch database's backends alone (the writer's and the dispatcher's connections) */
  postgresBackendsCpuUsPerAlert: number | null;
  /** summed over the runs */
  missing: number;
  duplicates: number;
}

export interface AlertsSustainedRow {
  target: Target['label'];
  commit: string;
  runs: number;
  alerts: number;
  /** median over the runs */
  alertsPerSecond: number;
  perRun: number[];
  dispatcherCpuUsPerAlert: number;
  benchCpuUsPerAlert: number;
  postgresCpuUsPerAlert: number | null;
  /** the scratch database's backends alone (the writer's and the dispatcher's connections) */
  postgresBackendsCpuUsPerAlert: number | null;
  missing: number;
  duplicates: number;
}

export interface AlertsTargets {
  /** the new tree's p99 delay at 100 alerts/s, ms: target ≤ 250 */
  p99At100: { value: number | null; target: 250; met: boolean | null; ratioToBefore: number | null };
  /** sustained alerts/s, this tree over the baseline: target ≥ 10 */
  sustainedRatio: { value: number | null; target: 10; met: boolean | null };
  /** every key delivered exactly once, in every scenario of every run */
  exactlyOnce: { missing: number; duplicates: number; met: boolean };
}

const usPer = (ms: number | null, alerts: number) => (ms === null ? null : (ms * 1000) / alerts);
function medianOrNull(values: (number | null)[]): number | null {
  return values.some((v) => v === null) ? null : round(median(values as number[]));
}

function pacedRows(ctx: BenchContext, runs: TreeRun[], delays: Map<Target, Map<number, number[]>>): AlertsPacedRow[] {
  const targets = ctx.before ? [ctx.before, ctx.after] : [ctx.after];
  return PACED.flatMap((scenario) =>
    targets.map((target) => {
      const ofTree = runs
        .filter((r) => r.target === target.label)
        .map((r) => r.paced.find((p) => p.rate === scenario.rate)!);
      const sorted = [...(delays.get(target)!.get(scenario.rate) ?? [])].sort((a, b) => a - b);
      return {
        rate: scenario.rate,
        target: target.label,
        commit: target.commit,
        runs: ofTree.length,
        alerts: ofTree[0]!.alerts,
        p50Ms: round(percentile(sorted, 50), 2),
        p99Ms: round(percentile(sorted, 99), 2),
        maxMs: round(sorted.at(-1)!, 2),
        committedPerSecond: round(median(ofTree.map((r) => r.committedPerSecond))),
        deliveredPerSecond: round(median(ofTree.map((r) => r.deliveredPerSecond))),
        dispatcherCpuUsPerAlert: round(median(ofTree.map((r) => usPer(r.dispatcherCpuMs, r.alerts)!))),
        benchCpuUsPerAlert: round(median(ofTree.map((r) => usPer(r.benchCpuMs, r.alerts)!))),
        postgresCpuUsPerAlert: medianOrNull(ofTree.map((r) => usPer(r.postgresCpuMs, r.alerts))),
        postgresBackendsCpuUsPerAlert: medianOrNull(ofTree.map((r) => usPer(r.postgresBackendsCpuMs, r.alerts))),
        missing: ofTree.reduce((s, r) => s + r.missing, 0),
        duplicates: ofTree.reduce((s, r) => s + r.duplicates, 0),
      };
    }),
  );
}

function sustainedRows(ctx: BenchContext, runs: TreeRun[]): AlertsSustainedRow[] {
  if (SUSTAINED_ROWS === 0) return [];
  const targets = ctx.before ? [ctx.before, ctx.after] : [ctx.after];
  return targets.map((target) => {
    const ofTree = runs.filter((r) => r.target === target.label).map((r) => r.sustained!);
    return {
      target: target.label,
      commit: target.commit,
      runs: ofTree.length,
      alerts: SUSTAINED_ROWS,
      alertsPerSecond: Math.round(median(ofTree.map((r) => r.alertsPerSecond))),
      perRun: ofTree.map((r) => r.alertsPerSecond),
      dispatcherCpuUsPerAlert: round(median(ofTree.map((r) => usPer(r.dispatcherCpuMs, r.alerts)!))),
      benchCpuUsPerAlert: round(median(ofTree.map((r) => usPer(r.benchCpuMs, r.alerts)!))),
      postgresCpuUsPerAlert: medianOrNull(ofTree.map((r) => usPer(r.postgresCpuMs, r.alerts))),
      postgresBackendsCpuUsPerAlert: medianOrNull(ofTree.map((r) => usPer(r.postgresBackendsCpuMs, r.alerts))),
      missing: ofTree.reduce((s, r) => s + r.missing, 0),
      duplicates: ofTree.reduce((s, r) => s + r.duplicates, 0),
    };
  });
}

function targetsOf(paced: AlertsPacedRow[], sustained: AlertsSustainedRow[], runs: TreeRun[]): AlertsTargets {
  const at100 = (label: string) => paced.find((r) => r.rate === 100 && r.target === label);
  const p99 = at100('after')?.p99Ms ?? null;
  const p99Before = at100('before')?.p99Ms ?? null;
  const after = sustained.find((r) => r.target === 'after');
  const before = sustained.find((r) => r.target === 'before');
  const ratio = after && before ? round(after.alertsPerSecond / before.alertsPerSecond, 2) : null;
  const missing = runs.reduce(
    (s, r) => s + r.paced.reduce((t, p) => t + p.missing, 0) + (r.sustained?.missing ?? 0),
    0,
  );
  const duplicates = runs.reduce(
    (s, r) => s + r.paced.reduce((t, p) => t + p.duplicates, 0) + (r.sustained?.duplicates ?? 0),
    0,
  );
  return {
    p99At100: {
      value: p99,
      target: 250,
      met: p99 === null ? null : p99 <= 250,
      ratioToBefore: p99 !== null && p99Before ? round(p99 / p99Before, 3) : null,
    },
    sustainedRatio: { value: ratio, target: 10, met: ratio === null ? null : ratio >= 10 },
    exactlyOnce: { missing, duplicates, met: missing === 0 && duplicates === 0 },
  };
}

const verdict = (met: boolean | null) => (met === null ? 'not measured' : met ? 'met' : 'not met');

export async function runAlertsBench(ctx: BenchContext): Promise<void> {
  const start = machineState();
  const postgres = await postgresCpu(ADMIN_DATABASE_URL);
  const receiver = new Receiver();
  await receiver.listen();
  const runs: TreeRun[] = [];
  const targets = ctx.before ? [ctx.after, ctx.before] : [ctx.after];
  const delays = new Map<Target, Map<number, number[]>>(targets.map((t) => [t, new Map()]));
  const began = performance.now();
  let rounds = 0;
  try {
    for (let r = 0; r < ROUNDS; r++) {
      const elapsed = performance.now() - began;
      if (r > 0 && elapsed + elapsed / r > BUDGET_S * 1000) {
        console.log(`alerts: round ${r} skipped, it would end past the ${BUDGET_S} s budget`);
        break;
      }
      for (const target of interleaved(ctx, r)) {
        runs.push(await treeRun(target, r, receiver, postgres, delays.get(target)!));
      }
      rounds += 1;
    }
  } finally {
    await receiver.close();
  }
  const end = machineState();
  const paced = pacedRows(ctx, runs, delays);
  const sustained = sustainedRows(ctx, runs);
  const targetsMet = targetsOf(paced, sustained, runs);
  const trees = { after: ctx.after.commit, before: ctx.before?.commit ?? null };
  const notDone = runs.reduce((s, r) => s + r.notDone, 0);
  const reclaimed = runs.reduce((s, r) => s + r.reclaimed, 0);
  const json = {
    bench: 'alerts',
    start,
    end,
    trees,
    rounds,
    maxRounds: ROUNDS,
    budgetSeconds: BUDGET_S,
    wallSeconds: Math.round((performance.now() - began) / 1000),
    concurrency: CONCURRENCY ? Number(CONCURRENCY) : 'default',
    scenarios: { paced: PACED, sustained: { rows: SUSTAINED_ROWS, perStatement: SUSTAINED_PER_STATEMENT } },
    postgresCpu: postgres.available
      ? { available: true, postmasterPid: postgres.postmasterPid }
      : { available: false, reason: postgres.reason },
    targets: targetsMet,
    paced,
    sustained,
    runs,
  };
  const cell = (v: number | null) => (v === null ? '–' : v);
  writeResults(INVESTIGATING ? 'alerts-investigation' : 'alerts', json, [
    `# alerts benchmark (${end.at})`,
    '',
    "Whale alert delivery by each tree's OutboxDispatcher (worker defaults" +
      (CONCURRENCY ? `, except concurrency ${CONCURRENCY}` : '') +
      `; trees: after ${trees.after}` +
      (trees.before ? `, before ${trees.before}` : '') +
      '), each in a process of its own on a scratch database migrated by its own tree.',
    'The bench process writes pending outbox rows as commits do (one INSERT per commit, autocommit, the same SQL for',
    'both trees; commit time = when the statement returned) and receives the POSTs on a local keep-alive HTTP server',
    'that answers 200 at once; delay = arrival of the Idempotency-Key − commit time, both on its clock. Paced: 1 alert/s',
    '(20 commits of 1 row, 1 s apart), 100/s (1,000 commits of 1 row, 10 ms apart), 1,000/s (500 commits of 10 rows,',
    `10 ms apart), against a running dispatcher. Sustained: ${SUSTAINED_ROWS.toLocaleString('en')} pending rows inserted`,
    `(${SUSTAINED_PER_STATEMENT.toLocaleString('en')} per statement) with the dispatcher stopped, then a new one started;`,
    'alerts/s = rows / (start → last arrival). Delay percentiles over the alerts of all rounds; rates and CPU are medians',
    `of ${rounds} round(s) (at most ${ROUNDS}; another starts only if it would end within ${BUDGET_S} s), the trees`,
    "alternating (the order flipping per round). dispatcher cpu = its process's",
    'user+system time from the first commit (sustained: the start) until no row is pending or claimed, per alert, from',
    '/proc; postgres cpu = the whole server over the same window (the INSERTs of the writer included, and any other',
    "client's work), its backends = the scratch database's backends alone; bench process cpu = this process (the",
    'writer and the receiver) over the same window. The dispatcher',
    'logs nothing below warn in either tree (the tree before logs one info line per alert in production). New-tree POSTs',
    'are signed (Standard Webhooks, one secret).',
    describePostgresCpu(postgres),
    describeMachine(start, end),
    '',
    '## targets',
    '',
    ...table(
      ['measure', 'value', 'target', 'verdict'],
      [
        [
          'p99 delay at 100 alerts/s (after)',
          targetsMet.p99At100.value === null
            ? '–'
            : `${targetsMet.p99At100.value} ms` +
              (targetsMet.p99At100.ratioToBefore === null
                ? ''
                : ` (${targetsMet.p99At100.ratioToBefore}× before's p99 in this run)`),
          '≤ 250 ms',
          verdict(targetsMet.p99At100.met),
        ],
        [
          'sustained alerts/s, after / before',
          targetsMet.sustainedRatio.value === null ? '–' : `${targetsMet.sustainedRatio.value}×`,
          '≥ 10×',
          verdict(targetsMet.sustainedRatio.met),
        ],
        [
          'every key delivered exactly once (all scenarios, all rounds)',
          `${targetsMet.exactlyOnce.missing} missing, ${targetsMet.exactlyOnce.duplicates} duplicates`,
          '0 and 0',
          verdict(targetsMet.exactlyOnce.met),
        ],
      ],
    ),
    '',
    `At the end of every run: ${notDone} rows not done, ${reclaimed} rows claimed more than once.`,
    '',
    '## paced',
    '',
    ...table(
      [
        'alerts/s',
        'tree',
        'commit',
        'alerts/run',
        'delay p50 ms',
        'p99 ms',
        'max ms',
        'committed/s',
        'delivered/s',
        'dispatcher cpu µs/alert',
        'postgres cpu µs/alert',
        'its backends µs/alert',
        'bench process cpu µs/alert',
        'missing',
        'duplicates',
      ],
      paced.map((r) => [
        r.rate,
        r.target,
        r.commit,
        r.alerts,
        r.p50Ms,
        r.p99Ms,
        r.maxMs,
        r.committedPerSecond,
        r.deliveredPerSecond,
        r.dispatcherCpuUsPerAlert,
        cell(r.postgresCpuUsPerAlert),
        cell(r.postgresBackendsCpuUsPerAlert),
        r.benchCpuUsPerAlert,
        r.missing,
        r.duplicates,
      ]),
    ),
    '',
    'Slowest alert of each paced run (its index in commit order, from 0, of the alerts of the run): ' +
      runs
        .flatMap((run) =>
          run.paced.map((p) => `${run.target} round ${run.round} at ${p.rate}/s #${p.maxIndex} of ${p.alerts}`),
        )
        .join('; ') +
      '.',
    '',
    '## sustained',
    '',
    ...table(
      [
        'tree',
        'commit',
        'alerts',
        'alerts/s (median)',
        'per round',
        'dispatcher cpu µs/alert',
        'postgres cpu µs/alert',
        'its backends µs/alert',
        'bench process cpu µs/alert',
        'missing',
        'duplicates',
      ],
      sustained.map((r) => [
        r.target,
        r.commit,
        r.alerts,
        r.alertsPerSecond,
        r.perRun.join(', '),
        r.dispatcherCpuUsPerAlert,
        cell(r.postgresCpuUsPerAlert),
        cell(r.postgresBackendsCpuUsPerAlert),
        r.benchCpuUsPerAlert,
        r.missing,
        r.duplicates,
      ]),
    ),
    '',
  ]);
}
