// Backfill throughput against a live source: consumePages (the backfill's page run, docs/protocol.md §8) pages a
// seeded journal of BENCH_TRANSITIONS transitions (default 100,000, about 250,000 events) from the retention floor
// to its target (the head at its first page) while the reference server appends BENCH_LIVE_RATE live transitions a
// second (default 20), against the anchor measured in the same run on the same server: consumeStream's from_floor
// replay of the same history (bench/stream-run.ts, checkpointEvery 100) up to the head when it starts. Every run is a
// process of its own with a fresh scratch database; the reference server is one more. One untimed page run first
// makes the server generate its journal (and warms Postgres up); then BENCH_ROUNDS rounds (default 2), the order of
// the rows alternating. Postgres's and the reference server's CPU over each timed window come from /proc, read by
// this process at the window's edges.
//
// `npm run bench -- backfill` (or `npx tsx bench/backfill.ts`) runs it.
// This file is also the page run's process (BENCH_BACKFILL_RUN set). Writes bench/results/backfill.json and .md.
import { pageSourceUrl, poolPageStore } from '../activities/index.js';
import { consumePages } from '../activities/page-consumer.js';
import { createPool, migrate } from '../db/index.js';
import { NO_ACTIONS } from '../protocol/types.js';
import { isEntryPoint } from '../worker/entry-point.js';
import {
  backendsCpuMs,
  describePostgresCpu,
  HAS_PROC,
  postgresCpu,
  processCpuMs,
  type PostgresCpu,
  type PostgresCpuSample,
} from './proc-cpu.js';
import { API_KEY, SEED, probeHead, startSimulator, stopSimulator, type Simulator } from './simulator-process.js';
import { streamRun } from './stream.js';
import {
  ADMIN_DATABASE_URL,
  endTimedWindow,
  TIMED_END,
  TIMED_START,
  currentTarget,
  describeMachine,
  machineState,
  median,
  percentile,
  round,
  runBenchProcess,
  table,
  withScratchDatabase,
  writeResults,
  type BenchContext,
} from './support.js';

const TRANSITIONS = Number(process.env.BENCH_TRANSITIONS ?? 100_000);
const LIVE_RATE = Number(process.env.BENCH_LIVE_RATE ?? 20);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
/** The stream anchor's checkpoint spacing (the reference server's `--checkpoint-every`). */
const CHECKPOINT_EVERY = 100;
/** The worker's defaults (PAGE_LIMIT, PAGE_CHUNK_SIZE), then larger pages and chunks. */
const PAGE_SETTINGS = [
  { limit: 500, chunkSize: 100 },
  { limit: 5000, chunkSize: 1000 },
];
const RUN_VARIABLE = 'BENCH_BACKFILL_RUN';

/** One page run's figures, as its process prints them. */
interface PageRunResult {
  outcome: string;
  target: number | null;
  appliedPosition: number;
  /** the source's head when the run ended: how far the live appends had moved it */
  headAtEnd: number | null;
  events: number;
  requests: number;
  pages: number;
  chunks: number;
  wallMs: number;
  cpuMs: number;
  chunkMs: number[];
  maxRssMb: number;
}

interface Window {
  postgresCpuMs: number | null;
  postgresBackendsCpuMs: number | null;
  serverCpuMs: number | null;
}

export interface BackfillRow {
  run: string;
  runs: number;
  /** medians over the timed runs */
  events: number;
  wallMs: number;
  eventsPerSecond: number;
  /** events/s over the stream replay's, medians of the same run */
  vsStream: number;
  cpuUsPerEvent: number;
  postgresCpuUsPerEvent: number | null;
  serverCpuUsPerEvent: number | null;
  /** page runs only */
  requests: number | null;
  pages: number | null;
  target: number | null;
  appliedPosition: number | null;
  headAtEnd: number | null;
  commit50Ms: number;
  commit99Ms: number;
  peakRssMb: number;
}

// ---- the page run's process ------------------------------------------------------------------------------------

async function pageRun(): Promise<PageRunResult> {
  const url = process.env.BENCH_URL!;
  const consumerId = process.env.BENCH_CONSUMER!;
  const limit = Number(process.env.BENCH_PAGE_LIMIT);
  const chunkSize = Number(process.env.BENCH_CHUNK_SIZE);
  return withScratchDatabase('whalehunt_bench_backfill', async (dbUrl) => {
    const pool = createPool(dbUrl, { max: 2 });
    try {
      await migrate(pool);
      const real = poolPageStore(pool);
      const chunkMs: number[] = [];
      const store = {
        ...real,
        commitPageChunk: async (chunk: Parameters<typeof real.commitPageChunk>[0]) => {
          const t = performance.now();
          const result = await real.commitPageChunk(chunk);
          chunkMs.push(performance.now() - t);
          return result;
        },
      };
      const quiet = () => undefined;
      process.stdout.write(`${TIMED_START} ${new URL(dbUrl).pathname.slice(1)}\n`);
      const cpu = process.cpuUsage();
      const t = performance.now();
      const outcome = await consumePages(
        {
          store,
          config: {
            url: pageSourceUrl(url),
            apiKey: API_KEY,
            stream: 'polymarket',
            limit,
            chunkSize,
            backoff: { maxAttempts: 3, initialMs: 5, maxMs: 20 },
            quarantinePolicy: { terminalReasons: [] },
            actions: NO_ACTIONS,
          },
          log: { info: quiet, warn: quiet, error: (msg, fields) => console.error(msg, fields) },
        },
        { consumerId, filter: {}, target: 'head' },
        { heartbeat: quiet, signal: new AbortController().signal },
      );
      const wallMs = performance.now() - t;
      const used = process.cpuUsage(cpu);
      await endTimedWindow();
      if (outcome.kind !== 'target_reached') throw new Error(`page run ended ${outcome.kind}, not at its target`);
      const c = outcome.counters;
      return {
        outcome: outcome.kind,
        target: outcome.target?.position ?? null,
        appliedPosition: outcome.progress.appliedPosition,
        headAtEnd: outcome.sourceHistory?.head ?? null,
        events: c.applied + c.duplicates + c.noEffect + c.quarantined,
        requests: c.requests,
        pages: c.pages,
        chunks: c.chunks,
        wallMs,
        cpuMs: (used.user + used.system) / 1000,
        chunkMs,
        maxRssMb: process.resourceUsage().maxRSS / 1024,
      };
    } finally {
      await pool.end();
    }
  });
}

// ---- the bench ---------------------------------------------------------------------------------------------------

let runSerial = 0;

/** Runs a page run's process, sampling Postgres's and the server's CPU at the edges of its timed window. */
async function measuredPageRun(
  sim: Simulator,
  settings: { limit: number; chunkSize: number },
  postgres: PostgresCpu,
): Promise<PageRunResult & Window> {
  runSerial += 1;
  let database = '';
  const samples: { postgres: PostgresCpuSample | null; serverMs: number | null }[] = [];
  const sample = () =>
    samples.push({
      postgres: postgres.available ? postgres.sample(database) : null,
      serverMs: HAS_PROC ? processCpuMs(sim.process.pid!) : null,
    });
  const result = await runBenchProcess<PageRunResult>(
    'backfill.ts',
    `page run (limit ${settings.limit}, chunk ${settings.chunkSize})`,
    {
      [RUN_VARIABLE]: '1',
      BENCH_URL: sim.url,
      BENCH_CONSUMER: `bench-backfill-${process.pid}-${runSerial}`,
      BENCH_PAGE_LIMIT: String(settings.limit),
      BENCH_CHUNK_SIZE: String(settings.chunkSize),
    },
    (line) => {
      if (line.startsWith(TIMED_START)) {
        database = line.slice(TIMED_START.length).trim();
        sample();
      } else if (line === TIMED_END) sample();
    },
  );
  const [start, end] = samples;
  if (!start || !end) throw new Error('page run did not mark its timed window');
  const delta = (a: number | null | undefined, b: number | null | undefined) => (a == null || b == null ? null : b - a);
  return {
    ...result,
    postgresCpuMs: delta(start.postgres?.serverMs, end.postgres?.serverMs),
    postgresBackendsCpuMs: backendsCpuMs(start.postgres, end.postgres),
    serverCpuMs: delta(start.serverMs, end.serverMs),
  };
}

interface Measured extends Window {
  events: number;
  wallMs: number;
  cpuMs: number;
  commitMs: number[];
  maxRssMb: number;
  page: PageRunResult | null;
}

function usPerEvent(runs: Measured[], ms: (run: Measured) => number | null): number | null {
  const values = runs.map(ms);
  if (values.some((v) => v === null)) return null;
  return round(median(values.map((v, i) => (v! * 1000) / runs[i]!.events)));
}

function rowOf(name: string, runs: Measured[], streamEventsPerSecond: number): BackfillRow {
  const commits = runs.flatMap((r) => r.commitMs).sort((a, b) => a - b);
  const eventsPerSecond = Math.round(median(runs.map((r) => r.events / (r.wallMs / 1000))));
  const pages = runs.map((r) => r.page).filter((p): p is PageRunResult => p !== null);
  const med = (f: (p: PageRunResult) => number | null) =>
    pages.length === 0 || pages.some((p) => f(p) === null) ? null : Math.round(median(pages.map((p) => f(p)!)));
  return {
    run: name,
    runs: runs.length,
    events: Math.round(median(runs.map((r) => r.events))),
    wallMs: Math.round(median(runs.map((r) => r.wallMs))),
    eventsPerSecond,
    vsStream: round(eventsPerSecond / streamEventsPerSecond, 2),
    cpuUsPerEvent: round(median(runs.map((r) => (r.cpuMs * 1000) / r.events))),
    postgresCpuUsPerEvent: usPerEvent(runs, (r) => r.postgresCpuMs),
    serverCpuUsPerEvent: usPerEvent(runs, (r) => r.serverCpuMs),
    requests: med((p) => p.requests),
    pages: med((p) => p.pages),
    target: med((p) => p.target),
    appliedPosition: med((p) => p.appliedPosition),
    headAtEnd: med((p) => p.headAtEnd),
    commit50Ms: commits.length ? round(percentile(commits, 50), 2) : 0,
    commit99Ms: commits.length ? round(percentile(commits, 99), 2) : 0,
    peakRssMb: round(median(runs.map((r) => r.maxRssMb))),
  };
}

export async function runBackfillBench(ctx: BenchContext): Promise<void> {
  const start = machineState();
  const postgres = await postgresCpu(ADMIN_DATABASE_URL);
  const sim = await startSimulator({
    transitions: TRANSITIONS,
    checkpointEvery: CHECKPOINT_EVERY,
    liveRate: LIVE_RATE,
    keepJournal: true,
  });
  const names = [...PAGE_SETTINGS.map((s) => `backfill (page ${s.limit}, chunk ${s.chunkSize})`), 'stream replay'];
  const timed = new Map<string, Measured[]>(names.map((n) => [n, []]));
  try {
    // Untimed: the server generates its journal as it is first read.
    const warm = await measuredPageRun(sim, PAGE_SETTINGS[1]!, postgres);
    console.log(`warm-up page run: ${warm.events} events to target ${warm.target} in ${Math.round(warm.wallMs)} ms`);
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 === 0 ? names : [...names].reverse();
      for (const name of order) {
        const settings = PAGE_SETTINGS[names.indexOf(name)];
        let measured: Measured;
        if (settings) {
          const page = await measuredPageRun(sim, settings, postgres);
          measured = { ...page, commitMs: page.chunkMs, page };
        } else {
          // The anchor: the stream consumer replays the same history from the floor, up to the head as it starts.
          const cut = await probeHead(sim.url);
          const stream = await streamRun(ctx.after, sim, cut, 'timed', postgres);
          measured = { ...stream, page: null };
        }
        timed.get(name)!.push(measured);
        console.log(
          `round ${r + 1} ${name}: ${measured.events} events in ${Math.round(measured.wallMs)} ms, ` +
            `${Math.round(measured.events / (measured.wallMs / 1000))} ev/s` +
            (measured.page
              ? `, target ${measured.page.target}, applied ${measured.page.appliedPosition}, head at the end ` +
                `${measured.page.headAtEnd}, ${measured.page.requests} requests, ${measured.page.pages} pages`
              : ''),
        );
      }
    }
  } finally {
    await stopSimulator(sim);
  }
  const streamRuns = timed.get('stream replay')!;
  const streamEventsPerSecond = median(streamRuns.map((r) => r.events / (r.wallMs / 1000)));
  const rows = names.map((name) => rowOf(name, timed.get(name)!, streamEventsPerSecond));
  const end = machineState();
  writeResults(
    'backfill',
    {
      bench: 'backfill',
      seed: SEED,
      transitions: TRANSITIONS,
      liveRate: LIVE_RATE,
      rounds: ROUNDS,
      tree: ctx.after.commit,
      postgresCpu: postgres.available
        ? { available: true, postmasterPid: postgres.postmasterPid }
        : { available: false, reason: postgres.reason },
      start,
      end,
      rows,
    },
    [
      `# backfill benchmark (${end.at}, ${ctx.after.commit})`,
      '',
      "A backfill's page run (consumePages, target: the head at its first page) pages a seeded journal (seed",
      `${SEED}, ${TRANSITIONS.toLocaleString('en')} transitions, filter {}) from the retention floor while the reference`,
      `server appends ${LIVE_RATE} live transitions a second, and stops at its target. The anchor, measured in the same`,
      `run on the same server, is consumeStream's from_floor replay of the same history (checkpointEvery`,
      `${CHECKPOINT_EVERY}) up to the head when it starts. vs stream = events/s over the stream replay's (medians).`,
      `Every run is a process of its own with a fresh scratch database; medians of ${ROUNDS} timed runs per row, the`,
      'order alternating; one untimed page run first (the server generates its journal as it is first read). commit =',
      "a page run's chunk transaction (effects, receipts, applied position), a stream run's checkpoint commit. postgres",
      'cpu = the whole Postgres server over the timed window (any other client counts too); server cpu = the reference',
      'server process. target = the head at the first page; applied = where the run stopped (its last page covers the',
      'live transitions appended meanwhile); requests = pages: no page per live transition.',
      describePostgresCpu(postgres),
      describeMachine(start, end),
      '',
      ...table(
        [
          'run',
          'events',
          'wall ms',
          'events/s',
          'vs stream',
          'client cpu µs/event',
          'postgres cpu µs/event',
          'server cpu µs/event',
          'requests',
          'pages',
          'target',
          'applied',
          'head at the end',
          'commit p50 ms',
          'commit p99 ms',
          'peak RSS MB',
        ],
        rows.map((r) => [
          r.run,
          r.events,
          r.wallMs,
          r.eventsPerSecond,
          r.vsStream,
          r.cpuUsPerEvent,
          r.postgresCpuUsPerEvent ?? '–',
          r.serverCpuUsPerEvent ?? '–',
          r.requests ?? '–',
          r.pages ?? '–',
          r.target ?? '–',
          r.appliedPosition ?? '–',
          r.headAtEnd ?? '–',
          r.commit50Ms,
          r.commit99Ms,
          r.peakRssMb,
        ]),
      ),
      '',
    ],
  );
}

if (process.env[RUN_VARIABLE]) {
  const result = await pageRun();
  process.stdout.write(`${JSON.stringify(result)}\n`);
} else if (isEntryPoint(import.meta.url)) {
  await runBackfillBench({ after: currentTarget(), before: null, args: process.argv.slice(2) });
}
