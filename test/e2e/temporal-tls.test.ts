// The Temporal connection configured as the `temporal` CLI is, against a TLS-terminating proxy in front of the
// run's dev server that requires a client certificate signed by a CA this test generates: the worker process
// (dist/worker/main.js) and the operator CLI (dist/cli/main.js) connect through it with the standard variables
// and with a profile file the `temporal` CLI reads too; a wrong CA or a missing client certificate fails at once
// with an error naming the setting; and the Temporal API key appears in no log line, no output and no workflow history.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumerWorkflowId } from '../../workflows/definitions.js';
import { runCli, type CliResult } from '../support/cli.js';
import { useTestDatabase } from '../support/db.js';
import { stopChildProcess, useResources } from '../support/leaks.js';
import { spawnWorker, type WorkerProcess } from '../support/worker-process.js';
import { generateTestPki, startTlsProxy, type TestPki, type TlsProxy } from '../support/tls-proxy.js';
import {
  createTestClient,
  sharedWorkflowBundlePath,
  temporalTarget,
  uniqueTaskQueue,
  waitFor,
} from '../support/temporal.js';
import { API_KEY, journalOf, testWorkerEnv, trade, within } from './consumer-harness.js';
import { ReferenceStreamServer } from '../../simulator/server.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const db = useTestDatabase();
/** Failing fast means well inside the CLI's own connect deadline, let alone a hang. */
const FAST_MS = 15_000;

/** The worker's stdout (JSON log lines) and stderr together. */
const outputOf = (worker: WorkerProcess) => [...worker.lines, ...worker.stderr];

/** The test's own Temporal settings only: nothing from the machine's environment or its temporal.toml. */
function withoutTemporalVariables(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([name]) => !name.startsWith('TEMPORAL_')));
}

function cli(env: Record<string, string>, ...args: string[]): Promise<CliResult> {
  const unset = Object.fromEntries(
    Object.keys(process.env)
      .filter((name) => name.startsWith('TEMPORAL_') && !(name in env))
      .map((name) => [name, '']),
  );
  return runCli({ ...unset, XDG_CONFIG_HOME: emptyConfigHome, ...env }, ...args);
}

let emptyConfigHome: string;
let dir: string;
let pki: TestPki;
let proxy: TlsProxy;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'whalehunt-tls-'));
  emptyConfigHome = join(dir, 'config-home');
  pki = generateTestPki(dir);
  proxy = await startTlsProxy(pki, temporalTarget().address);
});

afterAll(async () => {
  await proxy?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('Temporal over mTLS, configured like the temporal CLI', () => {
  const res = useResources();

  /** Starts a worker process and a consumer through the proxy, waits for a committed checkpoint, checks status. */
  async function consumeThroughProxy(temporalEnv: Record<string, string>, consumerId: string) {
    const server = res.track(
      await ReferenceStreamServer.start({
        journal: journalOf([1, 2, 3].map((i) => ({ events: [trade(`${consumerId}-${i}`, 'mA', '0.5', '2')] }))),
        apiKeys: [API_KEY],
        checkpointEvery: 1,
      }),
      (s) => s.close(),
      'reference stream server',
    );
    const taskQueue = uniqueTaskQueue('tls');
    const env = {
      ...testWorkerEnv({ databaseUrl: db.url, taskQueue, streamUrl: server.url, apiKey: API_KEY }),
      TEMPORAL_ADDRESS: '',
      TEMPORAL_NAMESPACE: '',
      XDG_CONFIG_HOME: emptyConfigHome,
      WORKFLOW_BUNDLE_PATH: sharedWorkflowBundlePath(),
      ...temporalEnv,
    };
    const acceptedBefore = proxy.accepted();
    const worker = spawnWorker(env, withoutTemporalVariables(process.env));
    res.track(worker.child, (child) => stopChildProcess(child, 20_000), 'worker process');
    await waitFor(() => Promise.resolve(outputOf(worker).some((line) => line.includes('"worker running"'))), {
      description: `the worker process running (output so far:\n${outputOf(worker).join('\n')})`,
      timeoutMs: 60_000,
    });

    const started = await cli(env, 'start', '--consumer', consumerId, '--start', 'from_floor', '--lease-ms', '3000');
    expect(started, started.stderr).toMatchObject({ code: 0 });
    await within(
      server.waitForAck((ack) => ack.consumerId === consumerId && ack.position === 3),
      60_000,
      'the ACK of checkpoint 3',
    );
    const status = await cli(env, 'status', '--consumer', consumerId);
    expect(status, status.stderr).toMatchObject({ code: 0 });
    expect(status.stdout).toMatch(/position\s+3\s/);
    // Both processes went through the proxy, each with a verified client certificate.
    expect(proxy.accepted() - acceptedBefore).toBeGreaterThanOrEqual(2);

    const testClient = res.track(await createTestClient());
    const handle = testClient.client.workflow.getHandle(consumerWorkflowId(consumerId));
    const history = JSON.stringify(await handle.fetchHistory());
    await handle.terminate('test over');
    await res.close(worker.child);
    await res.close(testClient);
    await res.close(server);
    expect((await worker.exited).code).toBe(0);
    return { env, worker, outputs: [started, status], history };
  }

  it('worker and CLI connect with the standard variables; the API key is in no log, output or history', async () => {
    const temporalApiKey = `tmprl-test-key-${randomUUID()}`;
    const { worker, outputs, history } = await consumeThroughProxy(
      {
        TEMPORAL_ADDRESS: proxy.address,
        TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.caCert,
        TEMPORAL_TLS_CLIENT_CERT_PATH: pki.clientCert,
        TEMPORAL_TLS_CLIENT_KEY_PATH: pki.clientKey,
        TEMPORAL_API_KEY: temporalApiKey,
      },
      `tls-env-${randomUUID().slice(0, 8)}`,
    );
    // The worker logged its connection (so the check below reads real lines), without the key.
    const starting = outputOf(worker).find((line) => line.includes('"starting"'));
    expect(starting).toContain('"tls":"mutual"');
    expect(starting).toContain('"apiKeySet":true');
    expect(history.length).toBeGreaterThan(1000);
    for (const text of [...outputOf(worker), ...outputs.flatMap((o) => [o.stdout, o.stderr]), history]) {
      expect(text).not.toContain(temporalApiKey);
    }
  });

  it('worker, CLI and the temporal CLI share one profile file (TEMPORAL_CONFIG_FILE + TEMPORAL_PROFILE)', async () => {
    const configFile = join(dir, 'temporal.toml');
    writeFileSync(
      configFile,
      [
        '[profile.default]',
        'address = "127.0.0.1:1"',
        '',
        '[profile.tls-proxy]',
        `address = "${proxy.address}"`,
        `namespace = "${temporalTarget().namespace}"`,
        '[profile.tls-proxy.tls]',
        `server_ca_cert_path = "${pki.caCert}"`,
        `client_cert_path = "${pki.clientCert}"`,
        `client_key_path = "${pki.clientKey}"`,
        '',
      ].join('\n'),
    );
    const profileEnv = { TEMPORAL_CONFIG_FILE: configFile, TEMPORAL_PROFILE: 'tls-proxy' };
    const consumerId = `tls-profile-${randomUUID().slice(0, 8)}`;
    await consumeThroughProxy(profileEnv, consumerId);

    const temporalCli = (
      await promisify(execFile)('bash', [join(repoRoot, 'scripts/ensure-temporal-cli.sh')])
    ).stdout.trim();
    const described = await promisify(execFile)(
      temporalCli,
      ['workflow', 'describe', '--workflow-id', consumerWorkflowId(consumerId), '--output', 'json'],
      { env: { ...withoutTemporalVariables(process.env), ...profileEnv } },
    );
    expect(JSON.parse(described.stdout)).toMatchObject({
      workflowExecutionInfo: { status: 'WORKFLOW_EXECUTION_STATUS_TERMINATED' },
    });
  });

  it('a server certificate from another CA fails at once, naming the CA setting (variable or profile field)', async () => {
    const wrongCa = {
      TEMPORAL_ADDRESS: proxy.address,
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.otherCaCert,
      TEMPORAL_TLS_CLIENT_CERT_PATH: pki.clientCert,
      TEMPORAL_TLS_CLIENT_KEY_PATH: pki.clientKey,
    };
    const startedAt = performance.now();
    const result = await cli(wrongCa, 'list');
    expect(performance.now() - startedAt).toBeLessThan(FAST_MS);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`error (temporal_unavailable): cannot reach Temporal at ${proxy.address}`);
    expect(result.stderr).toContain(
      "the server's certificate is not signed by the CA in TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    );
    expect(result.stderr).not.toMatch(/^\s+at /m);

    const configFile = join(dir, 'wrong-ca.toml');
    writeFileSync(
      configFile,
      `[profile.prod]\naddress = "${proxy.address}"\n[profile.prod.tls]\nserver_ca_cert_path = "${pki.otherCaCert}"\n`,
    );
    const fromProfile = await cli({ TEMPORAL_CONFIG_FILE: configFile, TEMPORAL_PROFILE: 'prod' }, 'list');
    expect(fromProfile.code).toBe(1);
    expect(fromProfile.stderr).toContain('profile.prod.tls.server_ca_cert_path');

    const taskQueue = uniqueTaskQueue('tls');
    const workerStartedAt = performance.now();
    const worker = spawnWorker(
      {
        ...testWorkerEnv({ databaseUrl: db.url, taskQueue, streamUrl: 'ws://127.0.0.1:1', apiKey: API_KEY }),
        XDG_CONFIG_HOME: emptyConfigHome,
        ...wrongCa,
      },
      withoutTemporalVariables(process.env),
    );
    res.track(worker.child, (child) => stopChildProcess(child), 'worker process');
    expect((await within(worker.exited, FAST_MS + 20_000, 'the worker giving up')).code).toBe(1);
    // Process start and migrations take their time; the connection itself is not retried until a deadline.
    expect(performance.now() - workerStartedAt).toBeLessThan(FAST_MS + 20_000);
    await res.close(worker.child);
    expect(outputOf(worker).join('\n')).toContain('not signed by the CA in TEMPORAL_TLS_SERVER_CA_CERT_PATH');
  });

  it('no client certificate fails at once, saying the server wants one and which settings supply it', async () => {
    const noClientCert = { TEMPORAL_ADDRESS: proxy.address, TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.caCert };
    const startedAt = performance.now();
    const result = await cli(noClientCert, 'status', '--consumer', 'anyone');
    expect(performance.now() - startedAt).toBeLessThan(FAST_MS);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('certificate required');
    expect(result.stderr).toContain('set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH');
    expect(result.stderr).not.toMatch(/^\s+at /m);

    const certWithoutKey = await cli({ ...noClientCert, TEMPORAL_TLS_CLIENT_CERT_PATH: pki.clientCert }, 'list');
    expect(certWithoutKey.code).toBe(2);
    expect(certWithoutKey.stderr).toContain(
      'error (config_invalid): invalid configuration: TEMPORAL_TLS_CLIENT_KEY_PATH: is required with TEMPORAL_TLS_CLIENT_CERT_PATH',
    );
  });
});
