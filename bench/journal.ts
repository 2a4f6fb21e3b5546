// Memory of the reference server's journal: generate a large seeded journal, read it through once, then live
// appends with a reader at the head, each tree in a process of its own (bench/journal-run.ts). This tree at
// BENCH_JOURNAL_TRANSITIONS (default 400k); the baseline, which keeps every transition in memory (~1.1 GiB at
// 400k), at BENCH_JOURNAL_BEFORE_TRANSITIONS (default 100k) so that it does not starve a shared machine.
// Writes bench/results/journal.json and journal.md.
import type { JournalRunResult } from './journal-run.js';
import {
  describeMachine,
  machineState,
  round,
  table,
  runBenchProcess,
  writeResults,
  type BenchContext,
  type Target,
} from './support.js';

const TRANSITIONS = Number(process.env.BENCH_JOURNAL_TRANSITIONS ?? 400_000);
const BEFORE_TRANSITIONS = Number(process.env.BENCH_JOURNAL_BEFORE_TRANSITIONS ?? 100_000);
const LIVE = Number(process.env.BENCH_JOURNAL_LIVE ?? 50_000);

function journalRun(target: Target, transitions: number): Promise<JournalRunResult> {
  return runBenchProcess<JournalRunResult>('journal-run.ts', `journal run (${target.label})`, {
    BENCH_TARGET_ROOT: target.root,
    BENCH_JOURNAL_TRANSITIONS: String(transitions),
    BENCH_JOURNAL_LIVE: String(LIVE),
  });
}

export async function runJournalBench(ctx: BenchContext): Promise<void> {
  const start = machineState();
  const rows: (JournalRunResult & { target: string; commit: string })[] = [];
  for (const [target, transitions] of [
    [ctx.after, TRANSITIONS],
    ...(ctx.before ? [[ctx.before, BEFORE_TRANSITIONS] as const] : []),
  ] as const) {
    const result = await journalRun(target, transitions);
    rows.push({ target: target.label, commit: target.commit, ...result });
    console.log(`journal ${target.label}: ${transitions} transitions, heap ${round(result.heapAfterLiveMb)} MB`);
  }
  const end = machineState();
  writeResults('journal', { bench: 'journal', start, end, rows }, [
    `# journal memory (${end.at})`,
    '',
    "The reference server's Journal, seed 7: generate, read every transition once, then live appends with a reader at",
    `the head (${LIVE}). Live heap = heapUsed after a forced full GC; peak RSS = the process's getrusage maximum. The`,
    `baseline keeps every transition in memory, so it is measured at ${BEFORE_TRANSITIONS} transitions only.`,
    describeMachine(start, end),
    '',
    ...table(
      [
        'tree',
        'commit',
        'transitions',
        'live appends',
        'generate ms',
        'read ms',
        'heap after generate MB',
        'after read MB',
        'after live MB',
        'peak RSS MB',
      ],
      rows.map((r) => [
        r.target,
        r.commit,
        r.transitions,
        r.live,
        Math.round(r.generateMs),
        Math.round(r.readMs),
        round(r.heapAfterGenerateMb),
        round(r.heapAfterReadMb),
        round(r.heapAfterLiveMb),
        round(r.maxRssMb),
      ]),
    ),
    '',
  ]);
}
