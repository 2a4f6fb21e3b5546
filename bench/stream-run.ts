// One end-to-end streaming run of the stream bench, in a process of its own so that its CPU time and peak RSS
// are the client's alone: consumeStream of the tree at BENCH_TARGET_ROOT replays the reference server's journal
// from the floor to its cut into a fresh scratch database (or BENCH_DATABASE_URL's). BENCH_RUN_MODE=timed measures
// wall, CPU and commit latency without disturbing the run; BENCH_RUN_MODE=heap is a separate, untimed pass that
// forces a full GC every LIVE_HEAP_EVERY_MS and reports the largest live heap. The lines TIMED_START and TIMED_END
// mark the timed window on stdout (the parent samples the server's and Postgres's CPU there). Prints one JSON line
// last.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { consumeStream as ConsumeStream } from '../activities/consume-stream.js';
import type { ConsumeStreamDeps } from '../activities/stream-ports.js';
import type { ConsumeOutcome, StartDirective } from '../activities/types.js';
import type * as Db from '../db/index.js';
import { startGcStats, type GcStats } from './gc-stats.js';
import { API_KEY, SUBSCRIPTION } from './simulator-process.js';
import { endTimedWindow, TIMED_START, WORKER_STAGING, withScratchDatabase } from './support.js';
import { NO_ACTIONS } from '../protocol/types.js';

const LIVE_HEAP_EVERY_MS = 250;

export interface StreamRunResult {
  events: number;
  checkpoints: number;
  wallMs: number;
  cpuMs: number;
  commitMs: number[];
  /** the process's peak resident set (getrusage), start-up included */
  maxRssMb: number;
  /** heap mode only: the largest heapUsed right after a forced full GC */
  liveHeapMb: number | null;
  /** what the garbage collector did over the timed window */
  gc: GcStats;
  /**
   * The minimal consumer's only: start-up excluded, from the moment the last of its consumers had made its first
   * commit to the end, and the events committed in between
   */
  steady: { wallMs: number; events: number } | null;
}

async function run(): Promise<StreamRunResult> {
  const root = process.env.BENCH_TARGET_ROOT!;
  const url = process.env.BENCH_URL!;
  const cut = Number(process.env.BENCH_CUT);
  const consumerId = process.env.BENCH_CONSUMER!;
  const mode = process.env.BENCH_RUN_MODE;
  const heapMode = mode === 'heap';
  const from = async <T>(relative: string) => (await import(pathToFileURL(join(root, relative)).href)) as T;
  const { consumeStream } = await from<{ consumeStream: typeof ConsumeStream }>('activities/consume-stream.ts');
  const db = await from<typeof Db>('db/index.ts');

  const inDatabase = async (dbUrl: string): Promise<StreamRunResult> => {
    const pool = db.createPool(dbUrl, { max: 2 });
    try {
      await db.migrate(pool);
      const commitMs: number[] = [];
      let events = 0;
      let reachedCut: () => void = () => undefined;
      const cutCommitted = new Promise<void>((resolve) => (reachedCut = resolve));
      const quiet = () => undefined;
      const timed = async <R>(commit: Promise<R>): Promise<R> => {
        const t = performance.now();
        const result = await commit;
        commitMs.push(performance.now() - t);
        return result;
      };
      const committedEvents = (plans: readonly { events: readonly unknown[] }[], outcomes: { kind: string }[]) =>
        outcomes.forEach((outcome, i) => {
          if (outcome.kind === 'committed') events += plans[i]!.events.length;
        });
      // This tree's store commits runs of checkpoints (group commit); a baseline from before it, one at a time.
      const legacy = db as unknown as {
        commitCheckpoint: (pool: unknown, plan: unknown) => Promise<{ kind: string }>;
      };
      const groupCommit = typeof (db as { commitCheckpoints?: unknown }).commitCheckpoints === 'function';
      const store = groupCommit
        ? {
            acquireLease: (id: string, options: { existingOnly: boolean }) => db.acquireLease(pool, id, options),
            commitCheckpoints: async (
              plans: Parameters<typeof db.commitCheckpoints>[1],
              recent?: Parameters<typeof db.commitCheckpoints>[2],
            ) => {
              const outcomes = await timed(db.commitCheckpoints(pool, plans, recent));
              committedEvents(plans, outcomes);
              return outcomes;
            },
          }
        : ({
            acquireLease: (id: string, options: { existingOnly: boolean }) => db.acquireLease(pool, id, options),
            commitCheckpoint: async (plan: { events: readonly unknown[] }) => {
              const outcome = await timed(legacy.commitCheckpoint(pool, plan));
              committedEvents([plan], [outcome]);
              return outcome;
            },
          } as unknown as ConsumeStreamDeps['store']);
      const deps: ConsumeStreamDeps = {
        store,
        config: {
          url,
          apiKey: API_KEY,
          maxFrameBytes: 1024 * 1024,
          staging: WORKER_STAGING,
          quarantinePolicy: { terminalReasons: [] },
          actions: NO_ACTIONS,
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
          { consumerId, subscriptionId: SUBSCRIPTION, start, leaseMs: 600_000, expected: null },
          { heartbeat: quiet, signal: abort.signal },
        );
      };

      let liveHeap = 0;
      let liveSampler: NodeJS.Timeout | undefined;
      if (heapMode) {
        setFlagsFromString('--expose-gc');
        const gc = runInNewContext('gc') as () => void;
        liveSampler = setInterval(() => {
          gc();
          liveHeap = Math.max(liveHeap, process.memoryUsage().heapUsed);
        }, LIVE_HEAP_EVERY_MS);
      }
      process.stdout.write(`${TIMED_START} ${new URL(dbUrl).pathname.slice(1)}\n`);
      const stopGcStats = startGcStats();
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
      } finally {
        clearInterval(liveSampler);
      }
      const wallMs = performance.now() - t;
      const used = process.cpuUsage(cpu);
      const gc = stopGcStats();
      await endTimedWindow();
      return {
        events,
        checkpoints: commitMs.length,
        wallMs,
        cpuMs: (used.user + used.system) / 1000,
        commitMs,
        maxRssMb: process.resourceUsage().maxRSS / 1024,
        liveHeapMb: heapMode ? liveHeap / 2 ** 20 : null,
        steady: null,
        gc,
      };
    } finally {
      await pool.end();
    }
  };
  // BENCH_DATABASE_URL: an existing, migrated database whose consumer has history (the age bench); else a fresh one.
  const existing = process.env.BENCH_DATABASE_URL;
  return existing ? inDatabase(existing) : withScratchDatabase('whalehunt_bench_stream', inDatabase);
}

const result = await run();
process.stdout.write(`${JSON.stringify(result)}\n`);
