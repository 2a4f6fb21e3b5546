// `npm run build`: the production output in dist/, in the rooms' layout (dist/cli/main.js, dist/worker/main.js,
// ...): tsc's JavaScript, the migrations beside dist/db/migrate.js, the workflows bundled once
// (dist/workflow-bundle.js, which the compiled worker loads instead of running webpack at every start), and last
// dist/build-manifest.json, the hashes of the inputs it was built from (worker/build-info.ts checks them).
// `--if-stale` builds only when dist/ is not a complete build of the current inputs (scripts/test.sh).
import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';
import {
  BUILD_MANIFEST_FILE,
  buildProblem,
  DIST_DIR,
  hashInputs,
  PACKAGE_ROOT,
  WORKFLOW_BUNDLE_FILE,
  WORKFLOW_BUNDLER_OPTIONS,
  type BuildManifest,
} from '../worker/build-info.js';

async function build(args: string[]): Promise<number> {
  if (args.includes('--if-stale')) {
    const problem = buildProblem();
    if (problem === null) {
      console.log('build: dist/ is up to date');
      return 0;
    }
    console.log(`build: ${problem}`);
  }
  const startedAt = performance.now();
  const elapsed = () => `${((performance.now() - startedAt) / 1000).toFixed(1)} s`;
  // Hashed first: a file edited while the build runs leaves dist/ stale, never wrongly fresh.
  const files = hashInputs();
  // From scratch, so nothing of a deleted source survives in dist/.
  rmSync(DIST_DIR, { recursive: true, force: true });

  const tsc = spawnSync(join(PACKAGE_ROOT, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.build.json'], {
    cwd: PACKAGE_ROOT,
    stdio: 'inherit',
  });
  if (tsc.status !== 0) {
    console.error(`build: tsc failed (exit ${tsc.status ?? tsc.signal})`);
    return 1;
  }
  chmodSync(join(DIST_DIR, 'cli/main.js'), 0o755);
  cpSync(join(PACKAGE_ROOT, 'db/migrations'), join(DIST_DIR, 'db/migrations'), { recursive: true });
  console.log(`build: compiled in ${elapsed()}`);

  const { code } = await bundleWorkflowCode({
    workflowsPath: join(DIST_DIR, 'workflows/index.js'),
    ...WORKFLOW_BUNDLER_OPTIONS,
    logger: bundlerLogger,
  });
  writeFileSync(WORKFLOW_BUNDLE_FILE, code);

  const manifest: BuildManifest = { builtAt: new Date().toISOString(), node: process.version, files };
  writeFileSync(BUILD_MANIFEST_FILE, `${JSON.stringify(manifest, null, 2)}\n`);
  console.log(`build: dist/ written in ${elapsed()} (${Object.keys(files).length} inputs, workflow bundle included)`);
  return 0;
}

const noop = (): void => undefined;
/** Webpack's progress is noise here; its warnings and errors are not. */
const bundlerLogger = {
  trace: noop,
  debug: noop,
  info: noop,
  log: noop,
  warn: (message: string) => console.warn(`build: [bundler] ${message}`),
  error: (message: string) => console.error(`build: [bundler] ${message}`),
};

process.exit(await build(process.argv.slice(2)));
