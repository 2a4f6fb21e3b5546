// End-to-end streaming throughput: consumeStream (ws → codec → Session → StagingBuffer → commitCheckpoint → ACK)
// replaying a seeded journal from the floor to its cut, against the reference server in a child process (so
// its CPU and memory are not the client's) and a scratch database created and dropped per row. One row per
// checkpointEvery. A second, database-free pass replays the same captured frames through the codec and the
// Session alone, which splits the client's CPU time into decode and session/staging (plan building).
// Writes bench/results/stream.json and stream.md (with bench/results/stream.baseline.json, if present, as
// the "before" column).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type pg from 'pg';
import WebSocket from 'ws';
import { consumeStream, type ConsumeStreamDeps } from '../activities/consume-stream.js';
import type { ConsumeOutcome, StartDirective } from '../activities/types.js';
import { acquireLease, commitCheckpoints, createPool, migrate } from '../db/index.js';
import { decodeServerFrame, encodeClientFrame, type ServerFrame } from '../protocol/codec.js';
import { Session } from '../protocol/session.js';
import { percentile, withScratchDatabase } from './support.js';

const TRANSITIONS = Number(process.env.BENCH_TRANSITIONS ?? 20_000);
const SEED = 7;
/** BENCH_CHECKPOINT_EVERY=100 narrows a run while investigating. */
const CHECKPOINT_EVERY = (process.env.BENCH_CHECKPOINT_EVERY ?? '10,100,1000').split(',').map(Number);
/** Offline passes over the captured frames; the fastest is reported (the least disturbed by a shared machine). */
const OFFLINE_REPEATS = 5;
const API_KEY = 'bench-stream-key';
const CONSUMER = 'bench-stream';
const SUBSCRIPTION = 'bench-sub';
const DATABASE = 'whalehunt_bench_stream';
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const LIVE_HEAP_EVERY_MS = 250;
const STAGING = { maxEvents: 1_000_000, maxBytes: 1024 * 1024 * 1024, maxAgeMs: 300_000 };

interface Row {
  checkpointEvery: number;
  transitions: number;
  frames: number;
  events: number;
  checkpoints: number;
  /** from the first consumeStream call to the commit of the cut checkpoint */
  wallMs: number;
  eventsPerSecond: number;
  framesPerSecond: number;
  checkpointsPerSecond: number;
  commit: { p50Ms: number; p99Ms: number; totalMs: number };
  /** client process CPU (user + system) during the run */
  cpuMs: number;
  peakRssMb: number;
  /** heapUsed sampled every 20 ms: includes garbage not yet collected */
  peakHeapMb: number;
  /** the largest heapUsed right after a forced full GC (every LIVE_HEAP_EVERY_MS): the live set */
  liveHeapMb: number;
  /** database-free replay of the same frames: best of OFFLINE_REPEATS passes */
  offline: { decodeMs: number; sessionMs: number; decodeFramesPerSecond: number };
}

interface Simulator {
  url: string;
  process: ChildProcess;
}

/** The reference server as a child process: `simulator/main.ts` with a seeded journal. */
async function startSimulator(checkpointEvery: number): Promise<Simulator> {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      join(ROOT, 'simulator/main.ts'),
      '--port',
      '0',
      '--seed',
      String(SEED),
      '--transitions',
      String(TRANSITIONS),
      '--api-key',
      API_KEY,
      '--checkpoint-every',
      String(checkpointEvery),
      '--token-secret',
      'bench-stream-secret',
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`simulator exited with ${code} before listening`)));
    lines.on('line', (line) => {
      const match = /^ws\s+(\S+)/.exec(line);
      if (match) resolve(match[1]!);
    });
  });
  child.removeAllListeners('exit');
  return { url, process: child };
}

async function stopSimulator(sim: Simulator): Promise<void> {
  if (sim.process.exitCode !== null) return;
  const exited = new Promise((resolve) => sim.process.once('exit', resolve));
  sim.process.kill('SIGTERM');
  await exited;
}

/** The journal head from a hello: the cut of a from_floor subscription when nothing is appended live. */
async function probeHead(url: string): Promise<number> {
  const ws = new WebSocket(url);
  return new Promise((resolve, reject) => {
    ws.on('error', reject);
    ws.once('message', (data: Buffer) => {
      const frame = decodeServerFrame(data.toString('utf8'));
      ws.close();
      if (frame.type === 'hello') resolve(frame.history.head);
      else reject(new Error(`expected hello, got ${frame.type}`));
    });
  });
}

/** Every server frame of one from_floor replay up to the cut, as raw text, ACKing checkpoints like a client. */
async function captureFrames(url: string, cut: number): Promise<string[]> {
  const ws = new WebSocket(url);
  const frames: string[] = [];
  return new Promise((resolve, reject) => {
    let connectionId = '';
    ws.on('error', reject);
    ws.on('message', (data: Buffer) => {
      const text = data.toString('utf8');
      frames.push(text);
      const frame = JSON.parse(text) as ServerFrame;
      const send = (body: Parameters<typeof encodeClientFrame>[0]) => ws.send(encodeClientFrame(body));
      switch (frame.type) {
        case 'hello':
          connectionId = frame.connectionId;
          return send({ type: 'authenticate', apiKey: API_KEY });
        case 'authenticated':
          return send({
            type: 'subscribe',
            consumerId: 'bench-capture',
            subscriptionId: SUBSCRIPTION,
            filter: {},
            start: { mode: 'from_floor' },
          });
        case 'subscribed':
          if (frame.cut.position !== cut) reject(new Error(`capture cut ${frame.cut.position} is not the head ${cut}`));
          return;
        case 'checkpoint':
          send({
            type: 'ack',
            connectionId,
            generation: frame.generation,
            position: frame.position,
            token: frame.token,
          });
          if (frame.position >= cut) {
            ws.close();
            resolve(frames);
          }
          return;
        case 'error':
        case 'reset_required':
          return reject(new Error(`capture refused: ${text}`));
        default:
          return;
      }
    });
  });
}

/** Decode, then Session.receive, of the captured frames without a database (commits succeed at once). */
function offlinePass(frames: string[]): { decodeMs: number; sessionMs: number } {
  let t = performance.now();
  const decoded = frames.map((text) => decodeServerFrame(text));
  const decodeMs = performance.now() - t;
  const session = new Session({
    consumerId: 'bench-capture',
    subscriptionId: SUBSCRIPTION,
    filter: {},
    start: { mode: 'from_floor' },
    saved: null,
    committedPosition: null,
    fence: { leaseEpoch: 1, version: 0 },
    quarantinePolicy: { terminalReasons: [] },
    actions: { whaleAlertMinNotional: null },
    staging: STAGING,
    now: () => Date.now(),
  });
  let version = 0;
  t = performance.now();
  for (const frame of decoded) {
    for (const action of session.receive(frame)) {
      if (action.type === 'commit') session.committed(action.plan, { version: ++version });
      if (action.type === 'reconnect' || action.type === 'stop')
        throw new Error(`offline replay stopped: ${JSON.stringify(action)}`);
    }
  }
  return { decodeMs, sessionMs: performance.now() - t };
}

const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;

async function streamRow(checkpointEvery: number): Promise<Row> {
  const sim = await startSimulator(checkpointEvery);
  try {
    // The end-to-end run goes first so that its memory peak is not inflated by the captured frames.
    const cut = await probeHead(sim.url);
    const run = await withScratchDatabase(DATABASE, async (url) => {
      const pool = createPool(url, { max: 2 });
      try {
        await migrate(pool);
        return await consumeToCut(pool, sim.url, cut);
      } finally {
        await pool.end();
      }
    });

    const frames = await captureFrames(sim.url, cut);
    const events = frames.reduce(
      (n, text) =>
        n + (text.includes('"type":"batch"') ? (JSON.parse(text) as { events: unknown[] }).events.length : 0),
      0,
    );
    const checkpoints = frames.filter((text) => text.includes('"type":"checkpoint"')).length;
    const passes = Array.from({ length: OFFLINE_REPEATS }, () => offlinePass(frames));
    const offline = {
      decodeMs: Math.min(...passes.map((p) => p.decodeMs)),
      sessionMs: Math.min(...passes.map((p) => p.sessionMs)),
    };

    const seconds = run.wallMs / 1000;
    const commits = [...run.commitMs].sort((a, b) => a - b);
    return {
      checkpointEvery,
      transitions: TRANSITIONS,
      frames: frames.length,
      events,
      checkpoints,
      wallMs: Math.round(run.wallMs),
      eventsPerSecond: Math.round(events / seconds),
      framesPerSecond: Math.round(frames.length / seconds),
      checkpointsPerSecond: round(checkpoints / seconds),
      commit: {
        p50Ms: round(percentile(commits, 50), 2),
        p99Ms: round(percentile(commits, 99), 2),
        totalMs: Math.round(commits.reduce((a, b) => a + b, 0)),
      },
      cpuMs: Math.round(run.cpuMs),
      peakRssMb: round(run.peakRss / 2 ** 20),
      peakHeapMb: round(run.peakHeap / 2 ** 20),
      liveHeapMb: round(run.liveHeap / 2 ** 20),
      offline: {
        decodeMs: Math.round(offline.decodeMs),
        sessionMs: Math.round(offline.sessionMs),
        decodeFramesPerSecond: Math.round(frames.length / (offline.decodeMs / 1000)),
      },
    };
  } finally {
    await stopSimulator(sim);
  }
}

/** from_floor (returns `rebound` after its first commit), then resume until the cut checkpoint commits. */
async function consumeToCut(pool: pg.Pool, url: string, cut: number) {
  const commitMs: number[] = [];
  let reachedCut: () => void = () => undefined;
  const cutCommitted = new Promise<void>((resolve) => (reachedCut = resolve));
  const quiet = () => undefined;
  const deps: ConsumeStreamDeps = {
    store: {
      acquireLease: (id) => acquireLease(pool, id),
      commitCheckpoints: async (plans) => {
        const t = performance.now();
        const result = await commitCheckpoints(pool, plans);
        commitMs.push(performance.now() - t);
        return result;
      },
    },
    config: {
      url,
      apiKey: API_KEY,
      maxFrameBytes: 1024 * 1024,
      staging: STAGING,
      quarantinePolicy: { terminalReasons: [] },
      actions: { whaleAlertMinNotional: null },
      heartbeatEveryMs: 1_000,
      connectTimeoutMs: 10_000,
      reconnect: { maxAttempts: 3, initialMs: 5, maxMs: 20 },
    },
    log: { info: quiet, warn: quiet, error: (msg, fields) => console.error(msg, fields) },
    hooks: { afterCommit: (position) => (position >= cut ? reachedCut() : undefined) },
  };
  let abort = new AbortController();
  const consume = (start: StartDirective): Promise<ConsumeOutcome> => {
    abort = new AbortController();
    return consumeStream(
      deps,
      { consumerId: CONSUMER, subscriptionId: SUBSCRIPTION, start, leaseMs: 600_000, expected: null },
      { heartbeat: quiet, signal: abort.signal },
    );
  };

  fullGc();
  let peakRss = 0;
  let peakHeap = 0;
  const sample = () => {
    const m = process.memoryUsage();
    peakRss = Math.max(peakRss, m.rss);
    peakHeap = Math.max(peakHeap, m.heapUsed);
  };
  const sampler = setInterval(sample, 20);
  // A full GC every LIVE_HEAP_EVERY_MS, then heapUsed: the live set (what staging and queues really hold).
  let liveHeap = 0;
  const liveSampler = setInterval(() => {
    fullGc();
    liveHeap = Math.max(liveHeap, process.memoryUsage().heapUsed);
  }, LIVE_HEAP_EVERY_MS);
  const cpu = process.cpuUsage();
  const t = performance.now();
  try {
    const first = await consume({ mode: 'from_floor', filter: {} });
    if (first.kind !== 'rebound') throw new Error(`from_floor ended ${first.kind}`);
    if (first.committed.position !== cut) {
      const rest = consume({ mode: 'resume' });
      await Promise.race([
        cutCommitted,
        rest.then((o) => Promise.reject(new Error(`resume ended ${o.kind} before the cut`))),
      ]);
      abort.abort();
      await rest;
    }
    const wallMs = performance.now() - t;
    const used = process.cpuUsage(cpu);
    sample();
    return { wallMs, cpuMs: (used.user + used.system) / 1000, commitMs, peakRss, peakHeap, liveHeap };
  } finally {
    clearInterval(sampler);
    clearInterval(liveSampler);
  }
}

/** A full GC on demand, without asking whoever runs the bench for --expose-gc. */
let fullGc: () => void = () => undefined;

export async function runStreamBench(): Promise<void> {
  setFlagsFromString('--expose-gc');
  fullGc = runInNewContext('gc') as () => void;
  const rows: Row[] = [];
  for (const every of CHECKPOINT_EVERY) {
    const row = await streamRow(every);
    rows.push(row);
    console.log(
      `checkpointEvery ${every}: ${row.eventsPerSecond} ev/s, ${row.framesPerSecond} frames/s, ${row.checkpointsPerSecond} cp/s, ` +
        `commit p50 ${row.commit.p50Ms} ms p99 ${row.commit.p99Ms} ms, decode ${row.offline.decodeMs} ms, session ${row.offline.sessionMs} ms`,
    );
  }
  writeResults(rows);
}

function writeResults(rows: Row[]): void {
  const dir = join(ROOT, 'bench/results');
  mkdirSync(dir, { recursive: true });
  const meta = {
    bench: 'stream',
    at: new Date().toISOString(),
    node: process.version,
    seed: SEED,
    transitions: TRANSITIONS,
  };
  writeFileSync(join(dir, 'stream.json'), `${JSON.stringify({ ...meta, rows }, null, 2)}\n`);
  const baselinePath = join(dir, 'stream.baseline.json');
  const baseline = existsSync(baselinePath)
    ? (JSON.parse(readFileSync(baselinePath, 'utf8')) as { at: string; rows: Row[] })
    : null;
  const before = (every: number) => baseline?.rows.find((r) => r.checkpointEvery === every);
  const lines = [
    `# stream benchmark (${meta.at}, Node ${meta.node})`,
    '',
    `consumeStream replays a seeded journal (seed ${SEED}, ${TRANSITIONS} transitions, all events matched) from the floor to its cut:`,
    'from_floor (which returns after its first commit), then resume until the cut checkpoint commits. The reference server runs in a',
    'child process; each row gets a fresh scratch database. Rates are over the wall time from the first call to the cut commit.',
    "The captured-frame replay (decode / session columns) runs after the end-to-end run, so the memory columns are the streaming client's own.",
    'cpu = client process user+system time. Peak RSS / heap are sampled every 20 ms during the run (heap includes garbage not yet',
    `collected); live heap is the largest heapUsed right after a full GC forced every ${LIVE_HEAP_EVERY_MS} ms (those GCs are part of the wall time).`,
    'decode / session: a database-free replay of the same captured frames through decodeServerFrame, then Session.receive',
    `(validation, staging, content hashes, plans), best of ${OFFLINE_REPEATS} passes.`,
    `Machine load average at the end of the run: ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')} on ${availableParallelism()} cores.`,
    '',
    '| checkpointEvery | frames | events | checkpoints | wall ms | events/s | frames/s | checkpoints/s | commit p50 ms | commit p99 ms | commit total ms | client cpu ms | peak RSS MB | peak heap MB | live heap MB | decode ms | session ms |',
    '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map(
      (r) =>
        `| ${r.checkpointEvery} | ${r.frames} | ${r.events} | ${r.checkpoints} | ${r.wallMs} | ${r.eventsPerSecond} | ${r.framesPerSecond} | ${r.checkpointsPerSecond} | ` +
        `${r.commit.p50Ms} | ${r.commit.p99Ms} | ${r.commit.totalMs} | ${r.cpuMs} | ${r.peakRssMb} | ${r.peakHeapMb} | ${r.liveHeapMb} | ${r.offline.decodeMs} | ${r.offline.sessionMs} |`,
    ),
    '',
  ];
  if (baseline) {
    lines.push(
      '## before / after',
      '',
      `before: bench/results/stream.baseline.json, recorded ${baseline.at} by this bench on a tree whose protocol/ and`,
      'activities/consume-stream.ts predate the optimisations (commit bb31721), run back to back with the "after" run above.',
      '',
      '| checkpointEvery | events/s before | after | client cpu ms before | after | decode ms before | after | session ms before | after | peak RSS MB before | after | live heap MB before | after |',
      '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ...rows.map((r) => {
        const b = before(r.checkpointEvery);
        const cells = (x: Row | undefined) =>
          x
            ? [x.eventsPerSecond, x.cpuMs, x.offline.decodeMs, x.offline.sessionMs, x.peakRssMb, x.liveHeapMb ?? '–']
            : Array<string>(6).fill('–');
        const [bs, as] = [cells(b), cells(r)];
        return `| ${r.checkpointEvery} | ${bs.map((v, i) => `${v} | ${as[i]}`).join(' | ')} |`;
      }),
      '',
    );
  }
  writeFileSync(join(dir, 'stream.md'), lines.join('\n'));
  console.log(lines.join('\n'));
}
