// The METRICS_PORT endpoint's health and readiness, with real Postgres: /readyz is 503 naming the failed check
// while the database is unreachable or the worker is not polling, 200 when all pass; /metrics forwards Core's
// exposition after refreshing the database gauges from the outbox and quarantine tables, and serves the last one
// with its age when the runtime is slow or fails.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { noopMetricMeter } from '@temporalio/common';
import type pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createPool } from '../../db/index.js';
import { useTestDatabase } from '../support/db.js';
import { freePort } from '../../scripts/free-port.js';
import {
  SCRAPE_AGE_HEADER,
  SCRAPE_AGE_METRIC,
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
    expect(res.headers.get(SCRAPE_AGE_HEADER)).toBe('0');
    expect(await res.text()).toBe(
      '# TYPE up gauge\nup 1\n' +
        `# HELP ${SCRAPE_AGE_METRIC} Age of the metrics served: 0 when fresh, else how old the last scrape served is.\n` +
        `# TYPE ${SCRAPE_AGE_METRIC} gauge\n${SCRAPE_AGE_METRIC} 0\n`,
    );
    expect(errors).toEqual(['metrics: database gauges not refreshed']);
    expect((await fetch(`${server.url}/other`)).status).toBe(404);
  });

  it('never answers 500: a slow or failing runtime gets the last scrape served with its age, then fresh ones again', async () => {
    // The runtime's exporter: answers, then hangs past the bound (a loaded process), then fails, then recovers.
    let mode: 'answer' | 'hang' | 'fail' = 'answer';
    let scrapes = 0;
    const exporter = createServer((_req, res) => {
      scrapes += 1;
      if (mode === 'hang') return; // never answers: the scrape's bound ends it
      if (mode === 'fail') return res.writeHead(500).end('exporter broke');
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(`up ${scrapes}\n`);
    });
    await new Promise<void>((r) => exporter.listen(0, '127.0.0.1', r));
    closers.push(
      () =>
        new Promise((r) => {
          exporter.closeAllConnections();
          exporter.close(() => r());
        }),
    );
    const errors: unknown[] = [];
    const server = await startTelemetryServer({
      host: '127.0.0.1',
      port: 0,
      metricsUpstream: `http://127.0.0.1:${(exporter.address() as AddressInfo).port}/metrics`,
      readiness: () => ({}),
      onError: (message, fields) => errors.push({ message, ...fields }),
    });
    closers.push(() => server.close());
    const scrape = async () => {
      const res = await fetch(`${server.url}/metrics`);
      return { status: res.status, age: Number(res.headers.get(SCRAPE_AGE_HEADER)), body: await res.text() };
    };

    const fresh = await scrape();
    expect(fresh).toMatchObject({ status: 200, age: 0 });
    expect(fresh.body).toMatch(/^up 1\n/);

    mode = 'hang';
    // Two scrapes at once while the runtime hangs: one question to it, both get the last scrape.
    const [stale, alsoStale] = await Promise.all([scrape(), scrape()]);
    expect(scrapes).toBe(2);
    for (const served of [stale, alsoStale]) {
      expect(served.status).toBe(200);
      expect(served.body).toMatch(/^up 1\n# the runtime did not answer \(TimeoutError: .*\): a scrape of \d+ s ago\n/);
      expect(served.body).toContain(`${SCRAPE_AGE_METRIC} ${served.age}\n`);
      expect(served.age).toBeGreaterThanOrEqual(2);
    }
    mode = 'fail';
    const failed = await scrape();
    expect(failed.status).toBe(200);
    expect(failed.body).toMatch(/^up 1\n# the runtime did not answer \(Error: HTTP 500: exporter broke\)/);
    expect(errors).toContainEqual(expect.objectContaining({ message: 'metrics: the runtime did not answer' }));

    mode = 'answer';
    const recovered = await scrape();
    expect(recovered).toMatchObject({ status: 200, age: 0 });
    expect(recovered.body).toMatch(/^up 4\n/);
  });

  it('a runtime that never answered leaves nothing to serve: 503, not 500', async () => {
    const server = await startTelemetryServer({
      host: '127.0.0.1',
      port: 0,
      metricsUpstream: `http://127.0.0.1:${await freePort()}/metrics`,
      readiness: () => ({}),
    });
    closers.push(() => server.close());
    const res = await fetch(`${server.url}/metrics`);
    expect(res.status).toBe(503);
    expect(await res.text()).toMatch(/^metrics not available yet: /);
  });

  it('samples outbox and held quarantine counts from the database', async () => {
    const empty = await sampleStore(db.pool);
    expect(empty).toEqual({ outboxPending: 0, outboxDead: 0, oldestPendingSeconds: 0, quarantineHeld: new Map() });
  });
});
