// The worker process's METRICS_PORT endpoint during a real run: a child worker (dist/worker/main.js as operators
// run it) consumes the reference stream; /healthz answers, /readyz turns ready once the worker polls, and a scrape
// taken after the consumer reached the head agrees with the database (events by outcome, checkpoints, the
// committed position) and carries the SDK's own worker metrics. The scrape passes `promtool check metrics`,
// and every metric the dashboard and the alert rules query is in it.
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Journal } from '../../simulator/journal.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import type { consumerWorkflow } from '../../workflows/index.js';
import { consumerIdSearchAttribute, consumerWorkflowId, phaseSearchAttribute } from '../../workflows/definitions.js';
import { useTestDatabase } from '../support/db.js';
import { stopChildProcess, useResources } from '../support/leaks.js';
import { spawnWorker } from '../support/worker-process.js';
import { createTestClient, sharedWorkflowBundlePath, uniqueTaskQueue, waitFor } from '../support/temporal.js';
import {
  EVENT_ONLY_METRICS,
  parseExposition,
  queriedMetricNames,
  sampleValue,
  sumSamples,
} from '../support/prometheus.js';
import { testWorkerEnv } from './consumer-harness.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const API_KEY = `wh-metrics-secret-${randomUUID()}`;
const db = useTestDatabase();

const logged = (lines: string[]) => lines.map((line) => JSON.parse(line) as Record<string, unknown> & { msg: string });

async function get(url: string): Promise<{ status: number; body: string }> {
  const res = await fetch(url);
  return { status: res.status, body: await res.text() };
}

describe('the worker metrics endpoint during a real run', () => {
  const res = useResources();

  it('serves health, readiness and metrics that agree with the database', async () => {
    const consumerId = 'metrics-e2e';
    const journal = Journal.generate({ seed: 777, transitions: 40 });
    const server = res.track(
      await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY], checkpointEvery: 4 }),
      (s) => s.close(),
      'reference stream',
    );
    const testClient = res.track(await createTestClient());
    const taskQueue = uniqueTaskQueue('metrics');
    const worker = spawnWorker({
      ...testWorkerEnv({ databaseUrl: db.url, taskQueue, streamUrl: server.url, apiKey: API_KEY }),
      WORKFLOW_BUNDLE_PATH: sharedWorkflowBundlePath(),
      LOG_LEVEL: 'INFO',
      METRICS_PORT: '0',
      METRICS_HOST: '127.0.0.1',
    });
    res.track(worker.child, (c) => stopChildProcess(c), 'worker process');

    const listening = await waitFor(
      () => Promise.resolve(logged(worker.lines).find((l) => l.msg === 'metrics endpoint listening')),
      { description: 'the metrics endpoint', timeoutMs: 30_000 },
    );
    const base = String(listening.metrics).replace(/\/metrics$/, '');
    expect(await get(`${base}/healthz`)).toEqual({ status: 200, body: 'ok\n' });
    expect((await get(`${base}/nope`)).status).toBe(404);
    await waitFor(async () => (await get(`${base}/readyz`)).status === 200, {
      description: '/readyz to report ready',
      timeoutMs: 30_000,
    });
    const ready = JSON.parse((await get(`${base}/readyz`)).body) as unknown;
    expect(ready).toEqual({
      ready: true,
      checks: { postgres: { ok: true }, temporal: { ok: true }, worker: { ok: true } },
    });

    const handle = await testClient.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
      taskQueue,
      workflowId: consumerWorkflowId(`${consumerId}-${randomUUID()}`),
      args: [{ consumerId, subscriptionId: 'sub-metrics', filter: {}, initialStart: 'from_floor', leaseMs: 60_000 }],
      typedSearchAttributes: [
        { key: consumerIdSearchAttribute, value: consumerId },
        { key: phaseSearchAttribute, value: 'streaming' },
      ],
    });
    // Scraped while the run goes on; the committed position only grows, so compare at one committed state.
    const scrape = await waitFor(
      async () => {
        const body = (await get(`${base}/metrics`)).body;
        const samples = parseExposition(body);
        const position = sampleValue(samples, 'whalehunt_committed_position', { consumer: consumerId });
        return position === journal.head ? { body, samples } : undefined;
      },
      { description: `a scrape with the committed position at the head ${journal.head}`, timeoutMs: 60_000 },
    );
    await handle.terminate('test finished');

    const { samples, body } = scrape;
    // Kept for a look after the run (and as the source of test/fixtures/metrics-sample.prom).
    const dir = join(repoRoot, '.data', 'test-metrics');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'scrape.prom'), body);
    const { rows } = await db.pool.query<{ outcome: string; n: string }>(
      'SELECT outcome, count(*) AS n FROM event_receipts WHERE consumer_id = $1 GROUP BY outcome',
      [consumerId],
    );
    const receipts = Object.fromEntries(rows.map((r) => [r.outcome, Number(r.n)]));
    const events = (outcome: string) =>
      sumSamples(samples, 'whalehunt_events_committed_total', { consumer: consumerId, kind: 'stream', outcome });
    expect(receipts.applied).toBeGreaterThan(0);
    expect(events('applied')).toBe(receipts.applied);
    expect(events('no_effect')).toBe(receipts.no_effect ?? 0);
    expect(events('quarantined')).toBe(receipts.quarantined ?? 0);
    const checkpoint = await db.pool.query<{ position: string; version: number }>(
      'SELECT position, version FROM checkpoints WHERE consumer_id = $1',
      [consumerId],
    );
    // No decisions in this run: every version step is a committed checkpoint.
    expect(sumSamples(samples, 'whalehunt_checkpoints_committed_total', { consumer: consumerId })).toBe(
      checkpoint.rows[0]!.version,
    );
    expect(sampleValue(samples, 'whalehunt_checkpoint_version', { consumer: consumerId })).toBe(
      checkpoint.rows[0]!.version,
    );
    expect(Number(checkpoint.rows[0]!.position)).toBe(journal.head);
    expect(sampleValue(samples, 'whalehunt_head_position', { consumer: consumerId })).toBe(journal.head);
    expect(sumSamples(samples, 'whalehunt_commit_duration_seconds_count', { consumer: consumerId })).toBe(
      checkpoint.rows[0]!.version,
    );
    expect(sumSamples(samples, 'whalehunt_commit_to_ack_seconds_count', { consumer: consumerId })).toBeGreaterThan(0);
    expect(sampleValue(samples, 'whalehunt_outbox_pending', {})).toBe(0);
    expect(sampleValue(samples, 'whalehunt_outbox_dead', {})).toBe(0);
    expect(
      sampleValue(samples, 'whalehunt_consumer_awaiting_decision', { consumer: consumerId, reason: 'reset_required' }),
    ).toBe(0);
    // The SDK's own worker metrics share the endpoint.
    expect(samples.some((s) => s.name.startsWith('temporal_') && s.name.includes('poll'))).toBe(true);
    expect(samples.some((s) => s.name === 'temporal_activity_execution_latency_count')).toBe(true);

    // Real tooling on the real sample, and the dashboard and alerts query only what exists.
    execFileSync('promtool', ['check', 'metrics'], { input: body, stdio: ['pipe', 'pipe', 'pipe'] });
    // These appear once their event happened (none did in this run); the unit test pins their names.
    const names = new Set([...samples.map((s) => s.name), ...EVENT_ONLY_METRICS]);
    const dashboard = readFileSync(join(repoRoot, 'deploy/grafana/whalehunt-dashboard.json'), 'utf8');
    const rules = readFileSync(join(repoRoot, 'deploy/prometheus/alerts.yml'), 'utf8');
    const queried = [...queriedMetricNames(dashboard), ...queriedMetricNames(rules)];
    expect(queried.length).toBeGreaterThan(5);
    expect(queried.filter((name) => !names.has(name))).toEqual([]);

    // SIGTERM: the shutdown is logged, the process exits 0, the endpoint goes away with it.
    worker.child.kill('SIGTERM');
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    const messages = logged(worker.lines).map((l) => l.msg);
    expect(messages).toEqual(
      expect.arrayContaining([
        'lease started',
        'worker shutting down: leases stop at their next checkpoint boundary',
        'worker stopped',
      ]),
    );
    expect([...worker.lines, ...worker.stderr].filter((l) => l.includes(API_KEY))).toEqual([]);
    await expect(fetch(`${base}/healthz`)).rejects.toThrow();
    await res.close(worker.child);
    await res.close(testClient);
    await res.close(server);
  });
});
