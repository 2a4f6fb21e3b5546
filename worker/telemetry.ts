// The worker's HTTP endpoint on METRICS_PORT: /metrics for Prometheus, /healthz and /readyz for orchestrators.
// Core's Prometheus exporter serves only /metrics on an address of its own, so it listens on a loopback port
// nobody else sees and this server forwards scrapes to it: one port, one process, both kinds of endpoint. Just
// before forwarding a scrape, the counts that live in the database (outbox, held quarantine) are refreshed, so
// they are as fresh as the scrape without a timer querying Postgres when nobody looks. When the runtime's exporter
// is slow or fails (a loaded process), /metrics serves the last scrape it got, saying how old it is, rather than
// failing: a scrape never answers 500.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import type { MetricMeter } from '@temporalio/common';
import {
  HISTOGRAM_BUCKETS,
  meterMetrics,
  type ConsumerMetrics,
  type RetentionSample,
  type StoreSample,
} from '../activities/metrics.js';
import { lastMaintenanceRun, summarizeOutbox, tableSizes } from '../db/index.js';

/** The longest a readiness check or the store sample may take before it counts as failed. */
const CHECK_TIMEOUT_MS = 2_000;

export interface ReadinessCheck {
  ok: boolean;
  detail?: string;
}

export interface TelemetryServerOptions {
  host: string;
  port: number;
  /** Core's exporter, e.g. http://127.0.0.1:40123/metrics. */
  metricsUpstream: string;
  /** Named checks; the process is ready when every one passes. */
  readiness: () => Record<string, () => Promise<ReadinessCheck>>;
  /** Refreshes the database-derived gauges before a scrape is forwarded. */
  beforeScrape?: () => Promise<void>;
  onError?: (message: string, fields: Record<string, unknown>) => void;
}

export interface TelemetryServer {
  /** http://host:port (no path). */
  url: string;
  close(): Promise<void>;
}

export async function startTelemetryServer(options: TelemetryServerOptions): Promise<TelemetryServer> {
  const scrapes = new UpstreamScrapes(options.metricsUpstream);
  const server = createServer((req, res) => {
    handle(options, scrapes, req, res).catch((error: unknown) => {
      options.onError?.('telemetry request failed', { path: req.url, error });
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('internal error\n');
    });
  });
  await listen(server, options.port, options.host);
  const { port } = server.address() as AddressInfo;
  const host = options.host === '0.0.0.0' || options.host === '::' ? '127.0.0.1' : options.host;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    close: () =>
      new Promise<void>((resolveClose) => {
        server.closeAllConnections();
        server.close(() => resolveClose());
      }),
  };
}

async function handle(
  options: TelemetryServerOptions,
  scrapes: UpstreamScrapes,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://localhost').pathname;
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { allow: 'GET, HEAD' }).end();
    return;
  }
  switch (path) {
    case '/healthz':
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
      return;
    case '/readyz': {
      const checks = await runChecks(options.readiness());
      const ready = Object.values(checks).every((c) => c.ok);
      res.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify({ ready, checks })}\n`);
      return;
    }
    case '/metrics': {
      if (options.beforeScrape) {
        // A database that is away must not take the worker's own metrics down with it.
        await withTimeout(options.beforeScrape(), 'store sample').catch((error: unknown) =>
          options.onError?.('metrics: database gauges not refreshed', { error }),
        );
      }
      const scrape = await scrapes.get();
      if (scrape.failure !== null) options.onError?.('metrics: the runtime did not answer', { error: scrape.failure });
      if (scrape.body === null) {
        // Nothing to fall back on yet (the runtime failed its first scrape): unavailable, not broken.
        res.writeHead(503, { 'content-type': 'text/plain', 'retry-after': '5' });
        res.end(`metrics not available yet: ${scrape.failure}\n`);
        return;
      }
      res.writeHead(200, { 'content-type': scrape.contentType, [SCRAPE_AGE_HEADER]: String(scrape.ageSeconds) });
      const separator = scrape.body === '' || scrape.body.endsWith('\n') ? '' : '\n';
      res.end(scrape.body + separator + scrapeAgeLines(scrape.ageSeconds, scrape.failure));
      return;
    }
    default:
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics, /healthz or /readyz\n');
  }
}

/** The header (and gauge) that say how old the served scrape is: 0 when fresh. */
export const SCRAPE_AGE_HEADER = 'x-whalehunt-scrape-age-seconds';
export const SCRAPE_AGE_METRIC = 'whalehunt_metrics_scrape_age_seconds';

interface Scrape {
  /** The exposition to serve: the fresh one, else the last one that came; null when none ever came. */
  body: string | null;
  contentType: string;
  ageSeconds: number;
  /** Why the runtime gave no fresh exposition, when it did not. */
  failure: string | null;
}

/**
 * Scrapes of the runtime's exporter, one at a time (scrapes that arrive while one is under way share it, so a slow
 * runtime is not asked again and again), remembering the last that succeeded.
 */
class UpstreamScrapes {
  #last: { body: string; contentType: string; atMs: number } | null = null;
  #inFlight: Promise<Scrape> | null = null;

  constructor(private readonly url: string) {}

  get(): Promise<Scrape> {
    this.#inFlight ??= this.#scrape().finally(() => {
      this.#inFlight = null;
    });
    return this.#inFlight;
  }

  async #scrape(): Promise<Scrape> {
    try {
      const upstream = await fetch(this.url, { signal: AbortSignal.timeout(CHECK_TIMEOUT_MS) });
      const body = await upstream.text();
      if (!upstream.ok) throw new Error(`HTTP ${upstream.status}: ${body.slice(0, 200).trim()}`);
      const contentType = upstream.headers.get('content-type') ?? 'text/plain; version=0.0.4';
      this.#last = { body, contentType, atMs: Date.now() };
      return { body, contentType, ageSeconds: 0, failure: null };
    } catch (error) {
      const failure = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      const last = this.#last;
      if (last === null) return { body: null, contentType: 'text/plain', ageSeconds: 0, failure };
      const ageSeconds = Math.round((Date.now() - last.atMs) / 1000);
      return { body: last.body, contentType: last.contentType, ageSeconds, failure };
    }
  }
}

/** The scrape's age as a gauge (a comment says why when it is an old one), appended to the exposition. */
function scrapeAgeLines(ageSeconds: number, failure: string | null): string {
  return [
    ...(failure === null
      ? []
      : [`# the runtime did not answer (${failure.replace(/\s+/g, ' ')}): a scrape of ${ageSeconds} s ago`]),
    `# HELP ${SCRAPE_AGE_METRIC} Age of the metrics served: 0 when fresh, else how old the last scrape served is.`,
    `# TYPE ${SCRAPE_AGE_METRIC} gauge`,
    `${SCRAPE_AGE_METRIC} ${ageSeconds}`,
    '',
  ].join('\n');
}

async function runChecks(
  checks: Record<string, () => Promise<ReadinessCheck>>,
): Promise<Record<string, ReadinessCheck>> {
  const entries = await Promise.all(
    Object.entries(checks).map(async ([name, check]) => {
      const result = await withTimeout(check(), name).catch((error: unknown): ReadinessCheck => ({
        ok: false,
        detail: error instanceof Error ? error.message : String(error),
      }));
      return [name, result] as const;
    }),
  );
  return Object.fromEntries(entries);
}

/** Postgres answers a query on the pool. */
export function postgresCheck(pool: pg.Pool): () => Promise<ReadinessCheck> {
  return async () => {
    await pool.query('SELECT 1');
    return { ok: true };
  };
}

/** The counts behind whalehunt_outbox_* and whalehunt_quarantine_held. */
export async function sampleStore(pool: pg.Pool): Promise<StoreSample> {
  const alerts = await summarizeOutbox(pool);
  const held = await pool.query<{ consumer_id: string; held: string }>(
    `SELECT consumer_id, count(*) AS held FROM quarantine WHERE disposition = 'held' GROUP BY consumer_id`,
  );
  return {
    outboxPending: alerts.pending,
    outboxDead: alerts.dead,
    oldestPendingSeconds: alerts.oldestPendingSeconds ?? 0,
    quarantineHeld: new Map(held.rows.map((r) => [r.consumer_id, Number(r.held)])),
  };
}

/** The consumer tables' sizes and the last maintenance run, from the catalogue and maintenance_runs (no scans). */
export async function sampleRetention(pool: pg.Pool): Promise<RetentionSample> {
  const [tables, lastRun] = await Promise.all([tableSizes(pool), lastMaintenanceRun(pool)]);
  return { tables, lastRun };
}

/** A loopback port free right now, for Core's exporter (which cannot report the port it picked itself). */
export async function freeLoopbackPort(): Promise<number> {
  const probe = createServer();
  await listen(probe, 0, '127.0.0.1');
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolveClose) => probe.close(() => resolveClose()));
  return port;
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolveListen();
    });
  });
}

function withTimeout<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${CHECK_TIMEOUT_MS} ms`)), CHECK_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Core's Prometheus exporter: counters end in `_total`, durations in seconds, commit buckets in milliseconds. */
export function prometheusExporter(bindAddress: string) {
  return {
    prometheus: {
      bindAddress,
      countersTotalSuffix: true,
      useSecondsForDurations: true,
      histogramBucketOverrides: HISTOGRAM_BUCKETS,
    },
    // One process per scrape target already: the target labels say which; no service_name on every series.
    attachServiceName: false,
  };
}

export interface WorkerTelemetry extends TelemetryServer {
  metrics: ConsumerMetrics;
  /** The running worker whose connection and polling /readyz reports; null while starting or after stopping. */
  attach(worker: ReadinessSource | null): void;
}

/** What /readyz asks of the running worker. */
export interface ReadinessSource {
  checkTemporal(): Promise<ReadinessCheck>;
  polling(): ReadinessCheck;
}

/**
 * Serves the endpoint for a worker process whose Runtime exports to `metricsUpstream`: metrics through the
 * Runtime's meter, /readyz from Postgres and the attached worker.
 */
export async function startWorkerTelemetry(options: {
  host: string;
  port: number;
  metricsUpstream: string;
  meter: MetricMeter;
  pool: pg.Pool;
  onError: TelemetryServerOptions['onError'];
}): Promise<WorkerTelemetry> {
  const metrics = meterMetrics(options.meter);
  let worker: ReadinessSource | null = null;
  const notStarted = (): Promise<ReadinessCheck> => Promise.resolve({ ok: false, detail: 'worker not running' });
  const server = await startTelemetryServer({
    host: options.host,
    port: options.port,
    metricsUpstream: options.metricsUpstream,
    readiness: () => {
      const current = worker;
      return {
        postgres: postgresCheck(options.pool),
        temporal: current ? () => current.checkTemporal() : notStarted,
        worker: current ? () => Promise.resolve(current.polling()) : notStarted,
      };
    },
    beforeScrape: async () => {
      metrics.storeSampled(await sampleStore(options.pool));
      metrics.retentionSampled(await sampleRetention(options.pool));
    },
    ...(options.onError ? { onError: options.onError } : {}),
  });
  return {
    ...server,
    metrics,
    attach: (source) => {
      worker = source;
    },
  };
}
