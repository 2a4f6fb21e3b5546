// `npm run bench -- <name>|all|summary [--baseline <git-ref> | --no-baseline]`: runs benchmarks by name. Benchmarks
// measure; tests never do. Each bench measures this checkout ("after") and, interleaved in the same run, the
// baseline ref ("before", default today's main, or the bench's own in BASELINES) checked out into a temporary git
// worktree; `all` then writes bench/results/summary.md and the chart.
import { runAgeBench } from './age.js';
import { ALERTS_BASELINE_REF, runAlertsBench } from './alerts.js';
import { runBackfillBench } from './backfill.js';
import { BUILD_BASELINE_REF, runBuildBench } from './build.js';
import { runCommitBench } from './commit.js';
import { runCommitLeanBench } from './commit-lean.js';
import { runCpuBench } from './cpu.js';
import { runJournalBench } from './journal.js';
import { runMemoryBench } from './memory.js';
import { runScaleBench } from './scale.js';
import { runStreamBench } from './stream.js';
import { writeSummary } from './summary.js';
import { baselineRef, checkoutBaseline, currentTarget, type BenchContext } from './support.js';
import { runTakeoverBench } from './takeover.js';
import { runTemporalBench } from './temporal.js';

const BENCHES: Record<string, (ctx: BenchContext) => Promise<void>> = {
  age: runAgeBench,
  alerts: runAlertsBench,
  backfill: runBackfillBench,
  build: runBuildBench,
  cpu: runCpuBench,
  stream: runStreamBench,
  commit: runCommitBench,
  'commit-lean': runCommitLeanBench,
  journal: runJournalBench,
  memory: runMemoryBench,
  scale: runScaleBench,
  takeover: runTakeoverBench,
  temporal: runTemporalBench,
};
/**
 * A bench's own default baseline, when run alone: alerts compares against the dispatcher before NOTIFY, build
 * against the tree before the compiled build.
 */
const BASELINES: Record<string, string> = { alerts: ALERTS_BASELINE_REF, build: BUILD_BASELINE_REF };
/**
 * Benches whose anchor is measured in this tree (backfill: the stream's replay of the same history; age: the same
 * database when empty): no worktree.
 */
const SAME_TREE_ANCHOR = new Set(['age', 'backfill']);
/**
 * What `all` runs: age loads tens of millions of rows (half an hour), takeover is a long kill -9 scenario of its
 * own, alerts a 5-minute one against a baseline of its own, and build measures start-up rather than throughput;
 * temporal, memory and scale need a Temporal CLI (TEMPORAL_CLI), so they join only when one is given. Together
 * they write every figure of the summary's ratio table.
 */
const ALL = [
  'cpu',
  'stream',
  'commit',
  'commit-lean',
  'journal',
  ...(process.env.TEMPORAL_CLI ? ['temporal', 'memory', 'scale'] : []),
];

const args = process.argv.slice(2);
const name = args[0];
const names = name === 'all' ? ALL : name && BENCHES[name] ? [name] : [];
if (name === 'summary') {
  // Rewrites summary.md and the chart from the results already in bench/results.
  writeSummary();
} else if (names.length === 0) {
  console.error(
    `usage: npm run bench -- <${Object.keys(BENCHES).join('|')}|all> [--baseline <git-ref> | --no-baseline]`,
  );
  process.exitCode = 2;
} else {
  const ref =
    names.length === 1 && SAME_TREE_ANCHOR.has(names[0]!)
      ? null
      : baselineRef(args, names.length === 1 ? BASELINES[names[0]!] : undefined);
  const before = ref ? checkoutBaseline(ref) : null;
  try {
    const ctx: BenchContext = { after: currentTarget(), before, args };
    for (const bench of names) await BENCHES[bench]!(ctx);
    if (name === 'all') writeSummary();
  } finally {
    before?.dispose();
  }
}
