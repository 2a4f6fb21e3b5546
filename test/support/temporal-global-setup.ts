// Vitest globalSetup of the e2e projects: one Temporal dev server (the CLI binary from
// scripts/ensure-temporal-cli.sh, the project's search attributes registered, its Web UI on a free port) and one
// bundle of workflows/ per run, shared by the projects that set it up. Tests read them through `inject()`; see
// test/support/temporal.ts.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode } from '@temporalio/worker';
import type { ProvidedContext } from 'vitest';
import type { TestProject } from 'vitest/node';
import { consumerIdSearchAttribute, kindSearchAttribute, phaseSearchAttribute } from '../../workflows/definitions.js';
import { freePort } from '../../scripts/free-port.js';
import { WORKFLOW_BUNDLER_OPTIONS } from '../../worker/build-info.js';

declare module 'vitest' {
  export interface ProvidedContext {
    temporalAddress: string;
    temporalNamespace: string;
    /** The dev server's Web UI (the browser test drives it; a failing test's workflows can be looked at there). */
    temporalUiUrl: string;
    /** Path of the bundled workflows/index.ts, or null when it does not exist (yet) or failed to bundle. */
    workflowBundlePath: string | null;
    /** Why workflowBundlePath is null; surfaced by the tests that need the bundle, not by every e2e test. */
    workflowBundleError: string | null;
  }
}

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const NAMESPACE = 'default';

type Provided = Pick<
  ProvidedContext,
  'temporalAddress' | 'temporalNamespace' | 'temporalUiUrl' | 'workflowBundlePath' | 'workflowBundleError'
>;

interface Started {
  provided: Provided;
  stop(): Promise<void>;
}

/**
 * The run's one server and bundle: each project's globalSetup runs in this same process, one after the other before
 * any test, so the other projects (database-outages, progress-refresh) take the first one's instead of starting their
 * own. The last project to tear down stops it.
 */
const shared = globalThis as typeof globalThis & {
  whalehuntE2eStack?: { started: Promise<Started>; users: number };
};

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const stack = (shared.whalehuntE2eStack ??= { started: start(), users: 0 });
  stack.users += 1;
  let provided: Provided;
  try {
    ({ provided } = await stack.started);
  } catch (error) {
    delete shared.whalehuntE2eStack;
    throw error;
  }
  project.provide('temporalAddress', provided.temporalAddress);
  project.provide('temporalNamespace', provided.temporalNamespace);
  project.provide('temporalUiUrl', provided.temporalUiUrl);
  project.provide('workflowBundlePath', provided.workflowBundlePath);
  project.provide('workflowBundleError', provided.workflowBundleError);
  return async () => {
    stack.users -= 1;
    if (stack.users > 0) return;
    delete shared.whalehuntE2eStack;
    await (await stack.started).stop();
  };
}

async function start(): Promise<Started> {
  const cliPath = await ensureTemporalCli();
  const port = await freePort();
  const uiPort = await freePort();
  const serverStartedAt = performance.now();
  const env = await TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: cliPath },
      ip: '127.0.0.1',
      port,
      uiPort,
      namespace: NAMESPACE,
      searchAttributes: [consumerIdSearchAttribute, phaseSearchAttribute, kindSearchAttribute],
      log: { format: 'pretty', level: 'warn' },
    },
  });
  const serverStartMs = Math.round(performance.now() - serverStartedAt);
  const uiUrl = `http://127.0.0.1:${uiPort}`;
  console.info(
    `[e2e] Temporal dev server at ${env.address} (namespace ${NAMESPACE}, Web UI ${uiUrl}) ready in ${serverStartMs} ms`,
  );

  const tempDir = await mkdtemp(join(tmpdir(), 'whalehunt-e2e-'));
  const stop = async () => {
    try {
      await env.teardown();
    } finally {
      await rm(tempDir, { recursive: true, force: true });
    }
  };
  try {
    const bundle = await bundleProjectWorkflows(tempDir);
    return {
      provided: {
        temporalAddress: env.address,
        temporalNamespace: NAMESPACE,
        temporalUiUrl: uiUrl,
        workflowBundlePath: bundle.path,
        workflowBundleError: bundle.error,
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

async function ensureTemporalCli(): Promise<string> {
  const script = join(repoRoot, 'scripts/ensure-temporal-cli.sh');
  try {
    // A first run may build the CLI with Go (minutes); the script's progress goes to our stderr.
    const { stdout } = await promisify(execFile)('bash', [script], { maxBuffer: 1 << 20 });
    const path = stdout.trim();
    if (!path) throw new Error('the script printed no path');
    return path;
  } catch (cause) {
    throw new Error(`scripts/ensure-temporal-cli.sh found no Temporal CLI: ${String(cause)}`, { cause });
  }
}

/** Bundles once per run so each test's in-process Worker loads code instead of running webpack. */
async function bundleProjectWorkflows(tempDir: string): Promise<{ path: string | null; error: string | null }> {
  const workflowsPath = join(repoRoot, 'workflows/index.ts');
  if (!existsSync(workflowsPath)) return { path: null, error: `${workflowsPath} does not exist` };
  const startedAt = performance.now();
  try {
    const { code } = await bundleWorkflowCode({
      workflowsPath,
      ...WORKFLOW_BUNDLER_OPTIONS,
      logger: quietBundlerLogger,
    });
    const path = join(tempDir, 'workflow-bundle.js');
    await writeFile(path, code);
    console.info(`[e2e] bundled workflows/index.ts in ${Math.round(performance.now() - startedAt)} ms`);
    return { path, error: null };
  } catch (error) {
    return {
      path: null,
      error: `bundling ${workflowsPath} failed: ${error instanceof Error ? error.message : String(error)}`,
    };
  }
}

const noop = (): void => undefined;
const quietBundlerLogger = {
  trace: noop,
  debug: noop,
  info: noop,
  log: noop,
  warn: (message: string) => console.warn(`[bundler] ${message}`),
  error: (message: string) => console.error(`[bundler] ${message}`),
};
