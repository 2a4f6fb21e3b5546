// The METRICS_PORT endpoint's health and readiness, with real Postgres: /readyz is 503 naming the failed check
// while the database is unreachable or the worker is not polling, 200 when all pass; /metrics forwards Core's
// exposition after refreshing the database gauges from the outbox and quarantine tables.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { noopMetricMeter } from '@temporalio/common';
import type pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createPool } from '../../db/index.js';
import { useTestDatabase } from '../support/db.js';
import {
  sampleStore,
  startTelemetryServer,
  startWorkerTelemetry,
  type TelemetryServer,
} from '../../worker/telemetry.js';

const db = useTestDatabase();
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

async function fakeCoreExporter(body: string): Promise<string> {
  const server = createServer((_req, res) =>
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(body),
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => new Promise((r) => server.close(() => r())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`;
}

async function readyz(server: TelemetryServer) {
  const res = await fetch(`${server.url}/readyz`);
  return {
    status: res.status,
    body: (await res.json()) as { ready: boolean; checks: Record<string, { ok: boolean }> },
  };
}

describe('the telemetry endpoint', () => {
  it('is live at once, ready only with Postgres reachable and the worker polling', async () => {
    const unreachable = createPool(db.url.replace(/\/[^/?]+(\?|$)/, '/whalehunt_no_such_database$1'));
    closers.push(() => unreachable.end());
    let pool: pg.Pool = unreachable;
    const telemetry = await startWorkerTelemetry({
      host: '127.0.0.1',
      port: 0,
      metricsUpstream: await fakeCoreExporter('# TYPE up gauge\nup 1\n'),
      meter: noopMetricMeter,
      get pool() {
        return pool;
      },
      onError: () => undefined,
    });
    closers.push(() => telemetry.close());

    expect((await fetch(`${telemetry.url}/healthz`)).status).toBe(200);
    const starting = await readyz(telemetry);
    expect(starting.status).toBe(503);
    expect(starting.body.checks).toMatchObject({
      postgres: { ok: false },
      temporal: { ok: false },
      worker: { ok: false },
    });

    let polling = false;
    telemetry.attach({
      checkTemporal: () => Promise.resolve({ ok: true }),
      polling: () => (polling ? { ok: true } : { ok: false, detail: 'worker initialized' }),
    });
    const noDatabase = await readyz(telemetry);
    expect(noDatabase.status).toBe(503);
    expect(noDatabase.body.checks).toMatchObject({ postgres: { ok: false }, temporal: { ok: true } });

    pool = db.pool;
    expect((await readyz(telemetry)).body.checks).toMatchObject({ postgres: { ok: true }, worker: { ok: false } });
    polling = true;
    expect(await readyz(telemetry)).toEqual({
      status: 200,
      body: { ready: true, checks: { postgres: { ok: true }, temporal: { ok: true }, worker: { ok: true } } },
    });
    telemetry.attach(null);
    expect((await readyz(telemetry)).status).toBe(503);
  });

  it('forwards the exporter on /metrics, even when the database gauges cannot be refreshed', async () => {
    const errors: string[] = [];
    const server = await startTelemetryServer({
      host: '127.0.0.1',
      port: 0,
      metricsUpstream: await fakeCoreExporter('# TYPE up gauge\nup 1\n'),
      readiness: () => ({}),
      beforeScrape: () => Promise.reject(new Error('database away')),
      onError: (message) => errors.push(message),
    });
    closers.push(() => server.close());
    const res = await fetch(`${server.url}/metrics`);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('# TYPE up gauge\nup 1\n');
    expect(errors).toEqual(['metrics: database gauges not refreshed']);
    expect((await fetch(`${server.url}/other`)).status).toBe(404);
  });

  it('samples outbox and held quarantine counts from the database', async () => {
    const empty = await sampleStore(db.pool);
    expect(empty).toEqual({ outboxPending: 0, outboxDead: 0, oldestPendingSeconds: 0, quarantineHeld: new Map() });
  });
});
