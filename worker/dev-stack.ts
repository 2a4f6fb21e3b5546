// The main job's development stack: the local services (embedded or configured Postgres, the Temporal dev
// server: local-services.ts), migrations, and the stream: the reference stream with live appends, its journal
// persisted under the data directory so the next run serves the same history, or the real service when
// WHALEHUNT_URL + WHALEHUNT_API_KEY point at it.
import { randomBytes } from 'node:crypto';
import { appendFileSync, existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type pg from 'pg';
import { createPool, migrate } from '../db/index.js';
import { Journal } from '../simulator/journal.js';
import { ReferenceStreamServer } from '../simulator/server.js';
import type { LocalServices, startLocalServices } from './local-services.js';
import type { TemporalSettings } from './temporal-connection.js';

/** The reference journal's first run: a few hundred transitions of history to replay before going live. */
const JOURNAL_SEED = 20_260_101;
const JOURNAL_INITIAL_TRANSITIONS = 400;

export interface DevStackIo {
  /** What the operator reads: where the stream comes from. */
  out(text: string): void;
  /** Progress of the services, their output, and each stop. */
  err(text: string): void;
}

export interface DevStackOptions {
  /** Absolute; holds the services' stores, the reference journal and its token secret. */
  dataDir: string;
  env: NodeJS.ProcessEnv;
  /** The reference stream appends one live transition this often. */
  appendEveryMs: number;
  io: DevStackIo;
  /** Aborted by the operator (Ctrl-C) while the services start: start nothing more. */
  signal: AbortSignal;
  /** The Temporal settings as loaded; an address configured there is used instead of starting a dev server. */
  temporal: TemporalSettings;
}

export interface StreamSource {
  url: string;
  apiKey: string;
  /** null when WHALEHUNT_URL points at the real service. */
  server: ReferenceStreamServer | null;
  journal: Journal | null;
}

export interface DevStack {
  services: LocalServices;
  /** Migrated; closed by stop(). */
  pool: pg.Pool;
  stream: StreamSource;
  /** What a worker on this stack reads instead of the caller's database, Temporal and stream variables. */
  workerEnv: Record<string, string>;
  /** Stops the stream, the pool and the services, in that order, saying each; failures are said, not thrown. */
  stop(): Promise<void>;
}

/** A step of a shutdown; a step without a name is not announced (only its failure is). */
export interface NamedStop {
  name: string | null;
  stop: () => Promise<void>;
}

/** Runs the stops in reverse order, every one even if another fails. */
export async function stopInReverse(stops: readonly NamedStop[], err: (text: string) => void): Promise<void> {
  for (const { name, stop } of [...stops].reverse()) {
    try {
      if (name) err(`stopping ${name}`);
      await stop();
    } catch (error) {
      err(
        `${name ? `stopping ${name}` : 'shutdown step'} failed: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
  }
}

/** The stack, or null when `signal` was aborted while the services started (they are stopped again). */
export async function startDevStack(options: DevStackOptions): Promise<DevStack | null> {
  const { dataDir, env, io } = options;
  const { startLocalServices } = await importLocalServices();
  const stops: NamedStop[] = [];
  let stopping: Promise<void> | null = null;
  const stop = (): Promise<void> => (stopping ??= stopInReverse(stops, (text) => io.err(text)));
  try {
    const { temporal } = options;
    const services = await startLocalServices({
      dataDir,
      env,
      log: (line) => io.err(`  ${line}`),
      temporalNamespace: temporal.namespace,
      ...(temporal.addressConfigured ? { temporalAddress: temporal.address } : {}),
    });
    stops.push({ name: 'local services', stop: () => services.stop() });
    if (options.signal.aborted) {
      await stop();
      return null;
    }
    const pool = createPool(services.databaseUrl);
    stops.push({ name: 'database pool', stop: () => pool.end() });
    await migrate(pool);
    const stream = await openStream(options);
    if (stream.server) stops.push({ name: 'reference stream', stop: () => stream.server!.close() });
    const workerEnv = {
      DATABASE_URL: services.databaseUrl,
      TEMPORAL_ADDRESS: services.temporal.address,
      TEMPORAL_NAMESPACE: services.temporal.namespace,
      WHALEHUNT_URL: stream.url,
      WHALEHUNT_API_KEY: stream.apiKey,
    };
    return { services, pool, stream, workerEnv, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * Loads local-services. Its embedded Postgres library installs SIGINT/SIGTERM handlers that stop Postgres and
 * exit at once, which would cut the worker's drain short; the stack stops Postgres itself, last, so those
 * handlers (exactly the ones the import added) are removed again.
 */
async function importLocalServices(): Promise<{ startLocalServices: typeof startLocalServices }> {
  const signals = ['SIGINT', 'SIGTERM'] as const;
  const before = new Map(signals.map((signal) => [signal, new Set(process.listeners(signal))]));
  const module = await import('./local-services.js');
  for (const signal of signals) {
    for (const listener of process.listeners(signal)) {
      if (!before.get(signal)!.has(listener)) process.off(signal, listener);
    }
  }
  return module;
}

async function openStream({ env, dataDir, appendEveryMs, io }: DevStackOptions): Promise<StreamSource> {
  if (env.WHALEHUNT_URL?.trim()) {
    // The worker's config validates both (and never echoes the key).
    io.out(`stream: the service at WHALEHUNT_URL`);
    return { url: env.WHALEHUNT_URL.trim(), apiKey: env.WHALEHUNT_API_KEY ?? '', server: null, journal: null };
  }
  const journal = await openJournal(join(dataDir, 'reference-journal.jsonl'), io);
  // Tokens are signed: a secret that survives restarts keeps yesterday's saved token valid today.
  const tokenSecret = await persistentSecret(join(dataDir, 'reference-token-secret'));
  const apiKey = `local-${randomBytes(16).toString('hex')}`;
  const server = await ReferenceStreamServer.start({
    journal,
    apiKeys: [apiKey],
    tokenSecret,
    liveAppendRate: 1000 / appendEveryMs,
  });
  io.out(
    `stream: reference server ${server.url} (history ${journal.historyId}, head ${journal.head}, ${(1000 / appendEveryMs).toFixed(1)} live transitions/s)`,
  );
  return { url: server.url, apiKey, server, journal };
}

/**
 * Loads the persisted journal, or generates and saves a new one. Every later append is written to the file
 * before the server sees it (this listener is registered first), so whatever was delivered survives a crash.
 */
async function openJournal(path: string, io: DevStackIo): Promise<Journal> {
  let journal: Journal;
  if (existsSync(path)) {
    journal = await Journal.load(path);
    io.out(`stream: resumed the reference journal ${path} (${journal.size} transitions)`);
  } else {
    journal = Journal.generate({ seed: JOURNAL_SEED, transitions: JOURNAL_INITIAL_TRANSITIONS });
    await journal.save(path);
    io.out(`stream: generated a reference journal of ${journal.size} transitions in ${path}`);
  }
  journal.onAppend((transition) =>
    appendFileSync(path, `${JSON.stringify({ record: 'transition', ...transition })}\n`, 'utf8'),
  );
  return journal;
}

async function persistentSecret(path: string): Promise<string> {
  if (existsSync(path)) return (await readFile(path, 'utf8')).trim();
  const secret = randomBytes(32).toString('hex');
  await writeFile(path, `${secret}\n`, { mode: 0o600 });
  return secret;
}
