// Runs the consumeStream core against a real ReferenceStreamServer and a real test database, and folds the
// server's journal independently so a test can say "every effect exactly once".
import type pg from 'pg';
import { acquireLease, commitCheckpoints, recordRetentionFloor } from '../../db/index.js';
import { consumeStream } from '../../activities/consume-stream.js';
import type { ConsumeStreamDeps } from '../../activities/stream-ports.js';
import type { ConsumeOutcome, ConsumeStreamInput, StartDirective, StreamHeartbeat } from '../../activities/types.js';
import { notional } from '../../protocol/decimal.js';
import { Journal } from '../../simulator/journal.js';
import type { JournalEvent } from '../../simulator/journal-types.js';
import { ReferenceStreamServer, type ReferenceServerOptions } from '../../simulator/server.js';
import { appliedEvents } from './reference-fold.js';
import { dumpState } from './state-dump.js';
import { NO_ACTIONS } from '../../protocol/types.js';

export const API_KEY = 'consumer-test-key-7c1e';
export const SUBSCRIPTION = 'sub-1';

export function journal(transitions = 40, seed = 11): Journal {
  return Journal.generate({ seed, transitions, qualityRate: 0.2, correctionRate: 0.2 });
}

export function startServer(
  opts: Partial<ReferenceServerOptions> & { journal: Journal },
): Promise<ReferenceStreamServer> {
  return ReferenceStreamServer.start({
    apiKeys: [API_KEY],
    tokenSecret: 'consumer-test-secret',
    checkpointEvery: 5,
    ...opts,
  });
}

export interface LogLine {
  level: 'info' | 'warn' | 'error';
  msg: string;
  fields?: Record<string, unknown>;
}

export interface Run {
  deps: ConsumeStreamDeps;
  logs: LogLine[];
  heartbeats: StreamHeartbeat[];
  committed: number[];
  abort: AbortController;
  /** Starts one consumeStream call; abort() ends it with `cancelled`. */
  consume(start: StartDirective, extra?: Partial<ConsumeStreamInput>): Promise<ConsumeOutcome>;
}

export function makeRun(
  pool: pg.Pool,
  server: ReferenceStreamServer,
  consumerId: string,
  overrides: Partial<ConsumeStreamDeps> = {},
): Run {
  const logs: LogLine[] = [];
  const heartbeats: StreamHeartbeat[] = [];
  const committed: number[] = [];
  const line = (level: LogLine['level']) => (msg: string, fields?: Record<string, unknown>) =>
    void logs.push({ level, msg, ...(fields ? { fields } : {}) });
  const deps: ConsumeStreamDeps = {
    store: {
      acquireLease: (id, options) => acquireLease(pool, id, options),
      commitCheckpoints: (plans) => commitCheckpoints(pool, plans),
      recordFloor: (id, history) => recordRetentionFloor(pool, id, history),
    },
    config: {
      url: server.url,
      apiKey: API_KEY,
      maxFrameBytes: server.settings.maxFrameBytes,
      staging: { maxEvents: 10_000, maxBytes: 16 * 1024 * 1024, maxAgeMs: 60_000 },
      quarantinePolicy: { terminalReasons: [] },
      actions: NO_ACTIONS,
      heartbeatEveryMs: 1_000,
      connectTimeoutMs: 5_000,
      reconnect: { maxAttempts: 3, initialMs: 5, maxMs: 20 },
    },
    log: { info: line('info'), warn: line('warn'), error: line('error') },
    ...overrides,
    hooks: {
      ...overrides.hooks,
      afterCommit: async (position) => {
        committed.push(position);
        await overrides.hooks?.afterCommit?.(position);
      },
    },
  };
  const run: Run = {
    deps,
    logs,
    heartbeats,
    committed,
    abort: new AbortController(),
    consume(start, extra = {}) {
      run.abort = new AbortController();
      return consumeStream(
        deps,
        { consumerId, subscriptionId: SUBSCRIPTION, start, leaseMs: 120_000, expected: null, ...extra },
        { heartbeat: (d) => heartbeats.push(d), signal: run.abort.signal },
      );
    },
  };
  return run;
}

/** Streams with `resume` until the server has an ACK at the journal head, then cancels the run. */
export async function resumeToHead(
  run: Run,
  server: ReferenceStreamServer,
  consumerId: string,
): Promise<ConsumeOutcome> {
  const head = server.journal.head;
  const reached = server.waitForAck((a) => a.consumerId === consumerId && a.position === head);
  const outcome = run.consume({ mode: 'resume' });
  await Promise.race([reached, outcome]);
  run.abort.abort();
  return outcome;
}

export function allEvents(j: Journal): (JournalEvent & { position: number })[] {
  const events: (JournalEvent & { position: number })[] = [];
  for (let i = 0; j.at(i); i += 1) {
    const t = j.at(i)!;
    events.push(...t.events.map((e) => ({ ...e, position: t.position })));
  }
  return events;
}

/** The journal applied once by a plain fold: entity → latest revision and notional. */
export function foldExecutions(j: Journal): { entityId: string; revision: number; notional: string }[] {
  const latest = new Map<string, { revision: number; notional: string }>();
  for (const e of appliedEvents(allEvents(j))) {
    const data = e.data as { price: string; size: string };
    latest.set(e.entityId, { revision: e.revision, notional: notional(data.price, data.size) });
  }
  return [...latest.entries()]
    .map(([entityId, v]) => ({ entityId, ...v }))
    .sort((a, b) => (a.entityId < b.entityId ? -1 : a.entityId > b.entityId ? 1 : 0));
}

/** Saved executions and receipts in the fold's shape. */
export async function savedEffects(pool: pg.Pool, consumerId: string) {
  const state = await dumpState(pool, consumerId);
  return {
    state,
    executions: state.executions.map((x) => ({ entityId: x.entityId, revision: x.revision, notional: x.notional })),
    receiptIds: state.receipts.map((r) => r.eventId),
  };
}
