// The stack works end to end: the run's Temporal dev server executes a workflow whose activity computes
// in real Postgres, the project's search attributes are registered and indexed, and the Temporal CLI
// script reuses a built binary instead of building again.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumerIdSearchAttribute, phaseSearchAttribute } from '../../workflows/definitions.js';
import { useResources } from '../support/leaks.js';
import { createTestClient, waitForVisibility, withWorker } from '../support/temporal.js';
import type { SmokeActivities, smokeNotionalWorkflow } from './fixtures/smoke-workflows.js';

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, '../..');
const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
// temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
const INDEXED_VALUE_TYPE_KEYWORD = 2;

describe('Temporal dev server + Postgres', () => {
  const res = useResources();

  it('runs a workflow whose activity computes in Postgres, findable by its search attributes', async () => {
    const pool = res.track(new pg.Pool({ connectionString: databaseUrl, max: 2 }));
    const testClient = res.track(await createTestClient());
    const activities: SmokeActivities = {
      async notionalInPostgres(price, size) {
        const { rows } = await pool.query<{ notional: string }>(
          'SELECT ($1::numeric * $2::numeric)::text AS notional',
          [price, size],
        );
        return rows[0]!.notional;
      },
    };
    const consumerId = `smoke-${randomUUID()}`;

    const notional = await withWorker(
      { workflowsPath: join(here, 'fixtures/smoke-workflows.ts'), activities },
      ({ taskQueue }) =>
        testClient.client.workflow.execute<typeof smokeNotionalWorkflow>('smokeNotionalWorkflow', {
          taskQueue,
          workflowId: consumerId,
          args: ['0.57', '1000.10'],
          typedSearchAttributes: [
            { key: consumerIdSearchAttribute, value: consumerId },
            { key: phaseSearchAttribute, value: 'streaming' },
          ],
        }),
    );
    // Exact decimal arithmetic: binary floating point would give 570.0569999999999.
    expect(notional).toBe('570.0570');

    await waitForVisibility(
      testClient.client,
      `WhalehuntConsumerId = "${consumerId}" AND WhalehuntPhase = "streaming"`,
      1,
    );

    await res.close(testClient);
    await res.close(pool);
  });

  it('has the project search attributes registered as Keyword', async () => {
    const testClient = res.track(await createTestClient());
    const { customAttributes } = await testClient.connection.operatorService.listSearchAttributes({
      namespace: testClient.client.options.namespace,
    });
    expect(customAttributes?.[consumerIdSearchAttribute.name]).toBe(INDEXED_VALUE_TYPE_KEYWORD);
    expect(customAttributes?.[phaseSearchAttribute.name]).toBe(INDEXED_VALUE_TYPE_KEYWORD);
    await res.close(testClient);
  });
});

// Runs the script with a PATH holding only what it needs plus a fake `go` that records its calls and
// "builds" by writing an executable into $GOBIN: the real build takes minutes and needs the network.
describe('scripts/ensure-temporal-cli.sh', () => {
  const script = join(repoRoot, 'scripts/ensure-temporal-cli.sh');
  let sandbox: string;
  let toolsDir: string;
  let noGoDir: string;
  let bash: string;

  beforeAll(async () => {
    sandbox = await mkdtemp(join(tmpdir(), 'ensure-temporal-cli-'));
    toolsDir = join(sandbox, 'tools');
    noGoDir = join(sandbox, 'no-go');
    await mkdir(toolsDir);
    await mkdir(noGoDir);
    bash = await commandPath('bash');
    for (const tool of ['dirname', 'basename', 'mkdir', 'flock']) {
      const target = await commandPath(tool);
      // flock is optional (the script only serialises concurrent builds with it).
      if (target) await symlink(target, join(toolsDir, tool));
      if (target && (tool === 'dirname' || tool === 'basename')) await symlink(target, join(noGoDir, tool));
    }
  });
  afterAll(async () => {
    await rm(sandbox, { recursive: true, force: true });
  });

  async function installFakeGo(): Promise<string> {
    const callsFile = join(sandbox, `go-calls-${randomUUID()}`);
    const chmodPath = await commandPath('chmod');
    await writeFile(
      join(toolsDir, 'go'),
      `#!${bash}\necho "GOBIN=$GOBIN $*" >> '${callsFile}'\nprintf '#!/bin/sh\\necho fake\\n' > "$GOBIN/temporal"\n${chmodPath} +x "$GOBIN/temporal"\n`,
    );
    await chmod(join(toolsDir, 'go'), 0o755);
    return callsFile;
  }

  function runScript(cacheHome: string, withGo: boolean) {
    const path = withGo ? toolsDir : noGoDir;
    return promisify(execFile)(bash, [script], { env: { PATH: path, HOME: sandbox, XDG_CACHE_HOME: cacheHome } });
  }

  it('builds into the per-user cache once, then reuses the cached binary without Go', async () => {
    const callsFile = await installFakeGo();
    const cacheHome = join(sandbox, `cache-${randomUUID()}`);
    const cached = join(cacheHome, 'whalehunt-consumer/bin/temporal');

    const first = await runScript(cacheHome, true);
    expect(first.stdout.trim()).toBe(cached);
    const calls = (await readFile(callsFile, 'utf8')).trim().split('\n');
    expect(calls).toEqual([`GOBIN=${dirname(cached)} install github.com/temporalio/cli/cmd/temporal@v1.5.1`]);

    // Second run: no Go on PATH at all, so any build attempt would fail.
    const second = await runScript(cacheHome, false);
    expect(second.stdout.trim()).toBe(cached);
    expect((await readFile(callsFile, 'utf8')).trim().split('\n')).toHaveLength(1);
  });

  it('fails naming the ways to get the CLI when there is neither a binary nor Go', async () => {
    const cacheHome = join(sandbox, `cache-${randomUUID()}`);
    const failure = await runScript(cacheHome, false).then(
      () => undefined,
      (error: { code: number; stdout: string; stderr: string }) => error,
    );
    expect(failure?.code).toBe(1);
    expect(failure?.stdout).toBe('');
    expect(failure?.stderr).toContain('brew install temporal');
    expect(failure?.stderr).toContain('docs.temporal.io/cli');
    expect(failure?.stderr).toContain('docker compose up');
  });
});

async function commandPath(name: string): Promise<string> {
  const { stdout } = await promisify(execFile)('bash', ['-c', `command -v ${name} || true`]);
  return stdout.trim();
}
