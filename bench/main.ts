// `npm run bench -- <name>`: runs one benchmark by name. Benchmarks measure; tests never do.
import { runCommitBench } from './commit.js';
import { runCommitLeanBench } from './commit-lean.js';
import { runStreamBench } from './stream.js';
import { runTakeoverBench } from './takeover.js';

const BENCHES: Record<string, () => Promise<void>> = {
  commit: runCommitBench,
  'commit-lean': runCommitLeanBench,
  stream: runStreamBench,
  takeover: runTakeoverBench,
};

const name = process.argv[2];
const bench = name ? BENCHES[name] : undefined;
if (!bench) {
  console.error(`usage: npm run bench -- <${Object.keys(BENCHES).join('|')}>`);
  process.exitCode = 2;
} else {
  await bench();
}
