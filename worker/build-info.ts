// Where this process's code comes from: the compiled output in dist/ (`npm run build`: JavaScript, the prebuilt
// workflow bundle and a manifest of the sources it was built from) or the TypeScript sources run through tsx
// (development, tests). The two differ in a few paths; and in a checkout the compiled entry points refuse a
// dist/ built from other sources than the ones next to it, so an edit or a pull never runs as stale code.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BundleOptions } from '@temporalio/worker';

/** This module's own extension says which: tsc writes dist/worker/build-info.js. */
export const COMPILED = import.meta.url.endsWith('.js');
export const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), COMPILED ? '../..' : '..');
export const DIST_DIR = join(PACKAGE_ROOT, 'dist');
/** The workflows bundled at build time, which the compiled worker loads instead of bundling at start. */
export const WORKFLOW_BUNDLE_FILE = join(DIST_DIR, 'workflow-bundle.js');
export const BUILD_MANIFEST_FILE = join(DIST_DIR, 'build-manifest.json');

/**
 * How workflow code is bundled, wherever it is (the build, a worker started from the sources, the tests): the
 * inline source map keeps its mappings, so workflow stack traces still name our sources and lines, but not the
 * sources themselves. Only the SDK's showStackTraceSources (off here) reads them, and the worker holds the parsed map
 * in its main and its workflow thread: ~12 MiB of resident memory (issue 22).
 */
export const WORKFLOW_BUNDLER_OPTIONS = {
  webpackConfigHook: (config) => ({ ...config, devtool: 'inline-nosources-source-map' }),
} satisfies Pick<BundleOptions, 'webpackConfigHook'>;

/** The rooms tsconfig.build.json compiles; every file in them is an input (db/migrations is copied as it is). */
export const SOURCE_ROOMS = ['protocol', 'domain', 'db', 'simulator', 'activities', 'workflows', 'worker', 'cli'];
/** Inputs outside the rooms: the lockfile pins the workflow SDK the bundle embeds. */
const BUILD_INPUTS = [
  'package-lock.json',
  'tsconfig.json',
  'tsconfig.build.json',
  'scripts/build.ts',
  'scripts/lean-proto-root.ts',
];

export interface BuildManifest {
  builtAt: string;
  node: string;
  /** sha256 of every input file, by path relative to the package root. */
  files: Record<string, string>;
}

/** The build's inputs under `root`, as sorted paths relative to it. */
export function buildInputs(root: string = PACKAGE_ROOT): string[] {
  const rooms = SOURCE_ROOMS.flatMap((room) =>
    existsSync(join(root, room))
      ? readdirSync(join(root, room), { recursive: true, withFileTypes: true })
          .filter((entry) => entry.isFile())
          .map((entry) => relative(root, join(entry.parentPath, entry.name)))
      : [],
  );
  return [...rooms, ...BUILD_INPUTS.filter((path) => existsSync(join(root, path)))].sort();
}

export function hashInputs(root: string = PACKAGE_ROOT): Record<string, string> {
  return Object.fromEntries(
    buildInputs(root).map((path) => [
      path,
      createHash('sha256')
        .update(readFileSync(join(root, path)))
        .digest('hex'),
    ]),
  );
}

/**
 * Null when `root`/dist holds a complete build of the inputs under `root` as they are now; otherwise what is
 * wrong with it, naming a few of the changed files.
 */
export function buildProblem(root: string = PACKAGE_ROOT): string | null {
  const manifestFile = join(root, 'dist', 'build-manifest.json');
  if (!existsSync(manifestFile)) return 'dist/ holds no finished build';
  if (!existsSync(join(root, 'dist', 'workflow-bundle.js'))) return 'dist/workflow-bundle.js is missing';
  const built = (JSON.parse(readFileSync(manifestFile, 'utf8')) as BuildManifest).files;
  const now = hashInputs(root);
  const changed = [...new Set([...Object.keys(built), ...Object.keys(now)])]
    .filter((path) => built[path] !== now[path])
    .sort();
  if (changed.length === 0) return null;
  const shown = changed.slice(0, 3).join(', ') + (changed.length > 3 ? ` and ${changed.length - 3} more` : '');
  return `dist/ is older than its sources (changed since the build: ${shown})`;
}

/**
 * The compiled entry points' guard: in a checkout (the sources next to dist/), exit 2 when dist/ is not a build of
 * them. An image that ships dist/ without the sources has nothing to compare with.
 */
export function exitIfStaleBuild(program: string): void {
  if (!COMPILED || !existsSync(join(PACKAGE_ROOT, 'tsconfig.build.json'))) return;
  const problem = buildProblem();
  if (problem === null) return;
  process.stderr.write(`${program}: ${problem}: run npm run build\n`);
  process.exit(2);
}

/**
 * The operator CLI as this code runs from the package root, for the commands it prints: the sources need no build
 * (`npm run cli` runs dist/, which a development checkout may not have yet).
 */
export const CLI_COMMAND = COMPILED ? 'node dist/cli/main.js' : 'npx tsx cli/main.ts';

/** Node's arguments to run the entry module `path` (e.g. `simulator/main`) of this code in a child process. */
export function nodeEntryArgs(path: string): string[] {
  return COMPILED ? [join(DIST_DIR, `${path}.js`)] : ['--import', 'tsx', join(PACKAGE_ROOT, `${path}.ts`)];
}
