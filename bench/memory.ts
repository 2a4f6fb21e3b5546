// The streaming run's memory over a long replay: consumeStream (bench/stream-run.ts in its memory mode, a process
// of its own with the worker's default staging limits) replays a seeded journal of BENCH_MEMORY_TRANSITIONS
// (default 400,000: about a million events) from the floor to its cut, a checkpoint every 1,000 batches, once per
// tree. The run samples its resident set every 500 ms with the events committed by then; reported are the peak
// and the RSS at 10, 25, 50, 75 and 100% of the events committed: a flat line is the target, growth a leak.
// No warm-up replay: a journal this long is longer than the reference server keeps generated (it regenerates as
// readers move), so every replay pays the same. Writes bench/results/memory.json and memory.md.
import { postgresCpu } from './proc-cpu.js';
import { SEED, probeHead, startSimulator, stopSimulator } from './simulator-process.js';
import { streamRun } from './stream.js';
import type { RssSample } from './stream-run.js';
import {
  ADMIN_DATABASE_URL,
  describeMachine,
  interleaved,
  machineState,
  round,
  table,
  writeResults,
  type BenchContext,
  type Target,
} from './support.js';

const TRANSITIONS = Number(process.env.BENCH_MEMORY_TRANSITIONS ?? 400_000);
const CHECKPOINT_EVERY = 1_000;
/** Shares of the replay's events at which the RSS is reported. */
const MARKS = [0.1, 0.25, 0.5, 0.75, 1];
/** Issue 12's bound on the worker's resident set over a 1M-event replay. */
const TARGET_MIB = 160;

export interface MemoryRow {
  target: Target['label'];
  commit: string;
  events: number;
  wallMs: number;
  eventsPerSecond: number;
  /** the largest sample; the process's getrusage peak (start-up included) beside it */
  peakSampledRssMib: number;
  maxRssMib: number;
  /** RSS at each of MARKS of the events committed (the first sample at or past it) */
  rssAtMib: number[];
  samples: number;
}

/** The first sample at or past `share` of `events` committed (the last one, taken after the cut, at 100%). */
function rssAt(samples: RssSample[], events: number, share: number): number {
  const sample = samples.find((s) => s.events >= share * events) ?? samples.at(-1)!;
  return round(sample.rssMb);
}

export async function runMemoryBench(ctx: BenchContext): Promise<void> {
  const start = machineState();
  const postgres = await postgresCpu(ADMIN_DATABASE_URL);
  const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery: CHECKPOINT_EVERY });
  const rows: MemoryRow[] = [];
  try {
    const cut = await probeHead(sim.url);
    for (const target of interleaved(ctx, 0)) {
      const run = await streamRun(target, sim, cut, 'memory', postgres);
      const samples = run.rss!;
      const row: MemoryRow = {
        target: target.label,
        commit: target.commit,
        events: run.events,
        wallMs: Math.round(run.wallMs),
        eventsPerSecond: Math.round(run.events / (run.wallMs / 1000)),
        peakSampledRssMib: round(Math.max(...samples.map((s) => s.rssMb))),
        maxRssMib: round(run.maxRssMb),
        rssAtMib: MARKS.map((share) => rssAt(samples, run.events, share)),
        samples: samples.length,
      };
      rows.push(row);
      console.log(
        `${target.label}: ${row.events} events at ${row.eventsPerSecond} ev/s, peak RSS ${row.peakSampledRssMib} MiB, ` +
          `at ${MARKS.map((m) => `${m * 100}%`).join('/')}: ${row.rssAtMib.join('/')} MiB`,
      );
    }
  } finally {
    await stopSimulator(sim);
  }
  const end = machineState();
  const json = { bench: 'memory', seed: SEED, transitions: TRANSITIONS, targetMib: TARGET_MIB, start, end, rows };
  writeResults('memory', json, [
    `# memory benchmark (${end.at})`,
    '',
    `consumeStream replays a seeded journal (seed ${SEED}, ${TRANSITIONS} transitions, a checkpoint every`,
    `${CHECKPOINT_EVERY} batches) from the floor to its cut, once per tree, in a process of its own with the worker's`,
    'default staging limits and a fresh scratch database: the streaming activity as the worker runs it, without the',
    'Temporal worker around it. The run samples its resident set (process.memoryUsage.rss) every 500 ms; RSS at x% =',
    'the first sample once x% of the events are committed (100% = after the cut commit). max RSS = getrusage peak,',
    `start-up included. Target: <= ${TARGET_MIB} MiB and flat.`,
    describeMachine(start, end),
    '',
    ...table(
      [
        'tree',
        'commit',
        'events',
        'wall ms',
        'events/s',
        'peak sampled RSS MiB',
        'max RSS MiB',
        ...MARKS.map((m) => `RSS at ${m * 100}% MiB`),
      ],
      rows.map((r) => [
        r.target,
        r.commit,
        r.events,
        r.wallMs,
        r.eventsPerSecond,
        r.peakSampledRssMib,
        r.maxRssMib,
        ...r.rssAtMib,
      ]),
    ),
    '',
  ]);
}
