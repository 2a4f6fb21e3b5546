// The compiled output the production path runs (dist/, `npm run build`; `npm test` builds it first): it is a build
// of the sources as they are, so a stale or missing dist/ fails here; the staleness check notices an edited, added
// or removed input; the compiled entry points refuse a stale dist/ in a checkout and run without the sources (the
// Docker image's layout); and nothing compiled imports a package the image does not install.
import { spawnSync } from 'node:child_process';
import {
  appendFileSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { builtinModules, createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { compileFunction } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI_UNUSED_PROTO_NAMESPACES, withoutUnusedProtoNamespaces } from '../../scripts/lean-proto-root.js';
import { buildInputs, buildProblem, hashInputs, PACKAGE_ROOT, type BuildManifest } from '../../worker/build-info.js';

const BUNDLES = ['workflow-bundle.js', join('cli', 'main.js')];

const scratchDirs: string[] = [];
afterEach(() => {
  for (const dir of scratchDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'whalehunt-build-'));
  scratchDirs.push(dir);
  return dir;
}

function write(root: string, path: string, text: string): void {
  mkdirSync(dirname(join(root, path)), { recursive: true });
  writeFileSync(join(root, path), text);
}

/** A copy of this checkout's build: `withSources` adds every input (a checkout), otherwise dist/ alone (the image). */
function copyOfBuild(withSources: boolean): string {
  const root = scratch();
  cpSync(join(PACKAGE_ROOT, 'dist'), join(root, 'dist'), { recursive: true });
  cpSync(join(PACKAGE_ROOT, 'package.json'), join(root, 'package.json'));
  symlinkSync(join(PACKAGE_ROOT, 'node_modules'), join(root, 'node_modules'));
  if (withSources) for (const path of buildInputs()) cpSync(join(PACKAGE_ROOT, path), join(root, path));
  return root;
}

function runNode(root: string, ...args: string[]) {
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' };
  return spawnSync(process.execPath, args, { cwd: root, env, encoding: 'utf8', timeout: 60_000 });
}

describe('dist/', () => {
  it('is a complete build of the sources as they are now', () => {
    expect(buildProblem(), 'run npm run build (npm test does)').toBeNull();
    // The package bin runs as a script of its own.
    const bin = join(PACKAGE_ROOT, 'dist/cli/main.js');
    expect(readFileSync(bin, 'utf8').split('\n')[0]).toBe('#!/usr/bin/env node');
    expect(statSync(bin).mode & 0o111).not.toBe(0);
  });

  it('imports nothing but Node built-ins, itself and the production dependencies', () => {
    const { dependencies } = JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    const builtins = new Set(builtinModules);
    const outside = readdirSync(join(PACKAGE_ROOT, 'dist'), { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile() && entry.name.endsWith('.js'))
      // The bundles carry their packages inside: the CLI's imports are checked below, the workflows' by the SDK.
      .filter((entry) => !BUNDLES.includes(relative(join(PACKAGE_ROOT, 'dist'), join(entry.parentPath, entry.name))))
      .flatMap((entry) => {
        const text = readFileSync(join(entry.parentPath, entry.name), 'utf8');
        const specifiers = [...text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|^import\s+)'([^']+)'/gm)].map((m) => m[1]!);
        return specifiers
          .filter((specifier) => !specifier.startsWith('.') && !specifier.startsWith('node:'))
          .map((specifier) =>
            specifier
              .split('/')
              .slice(0, specifier.startsWith('@') ? 2 : 1)
              .join('/'),
          )
          .filter((name) => !builtins.has(name) && dependencies[name] === undefined)
          .map((name) => `${entry.name}: ${name}`);
      });
    expect(outside).toEqual([]);
  });
});

describe('dist/cli/main.js, the CLI bundle', () => {
  const bundle = () => readFileSync(join(PACKAGE_ROOT, 'dist/cli/main.js'), 'utf8');

  it('loads nothing at start but Node built-ins: the packages are inside, the worker SDK is loaded by run alone', () => {
    const staticImports = [...bundle().matchAll(/^import\s[^'"]*['"]([^'"]+)['"]/gm)].map((m) => m[1]!);
    expect(staticImports.length).toBeGreaterThan(0);
    expect(staticImports.filter((specifier) => !specifier.startsWith('node:'))).toEqual([]);
    // What run and backfill load when they start: the modules tsc wrote beside the bundle.
    expect(bundle()).toContain('import("./run.js")');
    expect(bundle()).toContain('import("./backfill.js")');
  });

  it('is ASCII only, so Node reads it as one-byte text, and carries the lean protobuf root', () => {
    expect(bundle()).not.toMatch(/[\u0080-\uffff]/);
    expect(bundle()).not.toContain('io.temporal.api.cloud.cloudservice');
    expect(bundle()).toContain('io.temporal.api.workflowservice.v1');
  });

  it('keeps the exit code of an error thrown by a command it loads unbundled', () => {
    // backfill-status comes from dist/cli/backfill.js, whose CliError is another copy of the bundle's.
    const call = runNode(copyOfBuild(false), 'dist/cli/main.js', 'backfill-status', '--consumer', 'c1');
    expect(call).toMatchObject({
      status: 2,
      stdout: '',
      stderr: 'error (config_invalid): backfill-status reads the database: set DATABASE_URL\n',
    });
  });
});

describe("the CLI bundle's protobuf root (scripts/lean-proto-root.ts)", () => {
  interface ReflectedRoot {
    lookup(path: string): unknown;
    lookupService(path: string): { methodsArray: unknown[] };
    resolveAll(): unknown;
  }

  it('resolves every type and method the namespaces it keeps name, and holds none of those no command uses', () => {
    const path = createRequire(import.meta.url).resolve('@temporalio/proto/protos/json-module.js');
    const requireBeside = createRequire(path);
    const light = requireBeside('protobufjs/light') as object;
    const module = { exports: {} as ReflectedRoot };
    // A registry of roots of its own: the module caches its root there by name, and would add to a loaded one.
    const requireFresh = (id: string): unknown =>
      id === 'protobufjs/light' ? { ...light, roots: {} } : requireBeside(id);
    const load = compileFunction(withoutUnusedProtoNamespaces(readFileSync(path, 'utf8')), ['require', 'module']) as (
      require: (id: string) => unknown,
      module: { exports: ReflectedRoot },
    ) => void;
    load(requireFresh, module);
    const root = module.exports;
    for (const pruned of CLI_UNUSED_PROTO_NAMESPACES) expect(root.lookup(pruned.join('.'))).toBeNull();
    expect(() => root.resolveAll()).not.toThrow();
    expect(root.lookupService('temporal.api.workflowservice.v1.WorkflowService').methodsArray.length).toBeGreaterThan(
      100,
    );
    expect(root.lookupService('temporal.api.operatorservice.v1.OperatorService').methodsArray.length).toBeGreaterThan(
      0,
    );
  });

  it('fails the build on a json-module laid out otherwise or without a namespace it removes', () => {
    expect(() => withoutUnusedProtoNamespaces('module.exports = {};')).toThrow('json-module.js has a new layout');
    expect(() => withoutUnusedProtoNamespaces('$root.addJSON({"coresdk":{},"temporal":{"nested":{}}});')).toThrow(
      'has no namespace temporal.api.cloud',
    );
  });
});

describe('dist/workflow-bundle.js', () => {
  // What the workflow thread loads, every byte of it resident in the worker (issue 22's memory bound).
  const bundle = () => readFileSync(join(PACKAGE_ROOT, 'dist/workflow-bundle.js'), 'utf8');

  it('maps stack traces to our sources without carrying the sources', () => {
    const text = bundle();
    // Read as the SDK reads it (worker.js extractSourceMap): the last inline map, after its 'base64,'.
    const comment = text.lastIndexOf('//# sourceMappingURL=data:');
    const base64 = text.slice(text.indexOf('base64,', comment) + 'base64,'.length).trim();
    const map = JSON.parse(Buffer.from(base64, 'base64').toString('utf8')) as {
      sources: string[];
      sourcesContent?: unknown;
    };
    expect(map.sources.some((source) => source.endsWith('workflows/consumer.js'))).toBe(true);
    expect(map.sourcesContent).toBeUndefined();
  });

  it('holds no zod: operator input is checked by hand in the workflow', () => {
    expect(bundle()).not.toMatch(/node_modules\/zod\//);
  });
});

describe('the staleness check', () => {
  it('names what changed since the build: an edited, an added or a removed input; a missing bundle or manifest', () => {
    const root = scratch();
    write(root, 'tsconfig.build.json', '{}');
    write(root, 'cli/main.ts', 'export {};\n');
    write(root, 'db/migrations/0000_init.sql', 'CREATE TABLE t ();\n');
    const manifest: BuildManifest = {
      builtAt: new Date().toISOString(),
      node: process.version,
      files: hashInputs(root),
    };
    write(root, 'dist/build-manifest.json', JSON.stringify(manifest));
    write(root, 'dist/workflow-bundle.js', '');
    expect(buildProblem(root)).toBeNull();

    appendFileSync(join(root, 'cli/main.ts'), '// edited\n');
    expect(buildProblem(root)).toBe('dist/ is older than its sources (changed since the build: cli/main.ts)');
    write(root, 'cli/main.ts', 'export {};\n');
    expect(buildProblem(root)).toBeNull();

    write(root, 'worker/added.ts', 'export {};\n');
    rmSync(join(root, 'db/migrations/0000_init.sql'));
    expect(buildProblem(root)).toBe(
      'dist/ is older than its sources (changed since the build: db/migrations/0000_init.sql, worker/added.ts)',
    );

    rmSync(join(root, 'dist/workflow-bundle.js'));
    expect(buildProblem(root)).toBe('dist/workflow-bundle.js is missing');
    rmSync(join(root, 'dist/build-manifest.json'));
    expect(buildProblem(root)).toBe('dist/ holds no finished build');
  });

  it('makes the compiled CLI and worker refuse a stale dist/ in a checkout, exit 2, naming the change', () => {
    const root = copyOfBuild(true);
    expect(runNode(root, 'dist/cli/main.js', 'help')).toMatchObject({ status: 0, stderr: '' });

    appendFileSync(join(root, 'cli/args.ts'), '// edited after the build\n');
    const advice = 'dist/ is older than its sources (changed since the build: cli/args.ts): run npm run build\n';
    expect(runNode(root, 'dist/cli/main.js', 'help')).toMatchObject({
      status: 2,
      stdout: '',
      stderr: `whalehunt-consumer: ${advice}`,
    });
    expect(runNode(root, 'dist/worker/main.js', '--help')).toMatchObject({
      status: 2,
      stdout: '',
      stderr: `whalehunt worker: ${advice}`,
    });
  });

  it('lets the compiled CLI and worker run from dist/ alone, as in the Docker image', () => {
    const root = copyOfBuild(false);
    const cli = runNode(root, 'dist/cli/main.js', 'help');
    expect(cli, cli.stderr).toMatchObject({ status: 0 });
    expect(cli.stdout).toContain('whalehunt-consumer');
    const worker = runNode(root, 'dist/worker/main.js', '--help');
    expect(worker, worker.stderr).toMatchObject({ status: 0 });
    expect(worker.stdout).toContain('Usage: npm run worker');
  });
});
