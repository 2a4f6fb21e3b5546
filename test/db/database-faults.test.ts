// The database failing underneath the consumer: a consumer the workflow knows but the database does not (nothing
// written), bounded lock waits and idle transactions (a frozen lock holder never blocks a takeover for long), and
// a connection lost while a client is checked out (an 'error' event that must never end the process), and one
// report of an outage and of its end, whether a query in flight, an idle client or a refused connection saw it.
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createActivities, type WaitForDatabaseInput } from '../../activities/index.js';
import { DatabaseBehind } from '../../activities/stream-errors.js';
import { loadConfig } from '../../worker/config.js';
import {
  acquireLease,
  createPool,
  isConnectionLoss,
  SQLSTATE,
  StaleLeaseAttempt,
  StorageFailure,
} from '../../db/index.js';
import { lockCheckpoint } from '../../db/state.js';
import { inTransaction } from '../../db/transaction.js';
import { freePort } from '../../scripts/free-port.js';
import type { SessionBounds } from '../../db/session-settings.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import { journal, makeRun, startServer } from './consume-stream-support.js';

const db = useTestDatabase();

const BOUNDS: SessionBounds = { lockTimeoutMs: 300, statementTimeoutMs: 2_000, idleInTransactionTimeoutMs: 500 };

async function checkpointRows(consumerId: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM checkpoints WHERE consumer_id = $1',
    [consumerId],
  );
  return rows[0]!.n;
}

describe('a consumer the workflow knows and the database does not', () => {
  const res = useResources();

  it('acquireLease with existingOnly writes nothing for a missing consumer and bumps an existing one', async () => {
    expect(await acquireLease(db.pool, 'known-nowhere', { existingOnly: true })).toBeNull();
    expect(await checkpointRows('known-nowhere')).toBe(0);

    const first = await acquireLease(db.pool, 'known-here');
    const again = await acquireLease(db.pool, 'known-here', { existingOnly: true });
    expect(again?.leaseEpoch).toBe(first.leaseEpoch + 1);
  });

  it('a late start of an earlier attempt of the same activity is refused the lease; a later one or another activity takes it', async () => {
    const run = 'run-1/7';
    const second = await acquireLease(db.pool, 'attempts', { attempt: { activity: run, number: 2 } });
    // Attempt 1 was taken by a frozen worker's open poll and starts only once the worker is continued.
    const refused = await acquireLease(db.pool, 'attempts', { attempt: { activity: run, number: 1 } }).catch(
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(StaleLeaseAttempt);
    expect((refused as StaleLeaseAttempt).holderAttempt).toBe(2);
    const { rows } = await db.pool.query<{ lease_epoch: number }>(
      'SELECT lease_epoch FROM checkpoints WHERE consumer_id = $1',
      ['attempts'],
    );
    expect(rows[0]!.lease_epoch).toBe(second!.leaseEpoch);

    const third = await acquireLease(db.pool, 'attempts', { attempt: { activity: run, number: 3 } });
    expect(third?.leaseEpoch).toBe(second!.leaseEpoch + 1);
    // The next lease of the workflow is another activity: its first attempt takes the lease.
    const next = await acquireLease(db.pool, 'attempts', { attempt: { activity: 'run-1/8', number: 1 } });
    expect(next?.leaseEpoch).toBe(second!.leaseEpoch + 2);
  });

  it('a run holding a committed copy fails with DatabaseBehind and writes no checkpoint row', async () => {
    const server = res.track(await startServer({ journal: journal(5) }), (s) => s.close());
    const run = makeRun(db.pool, server, 'other-database');
    const error = await run
      .consume(
        { mode: 'resume' },
        { expected: { position: 9, token: 'saved-token', generation: 1, version: 3, filterHash: null } },
      )
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DatabaseBehind);
    expect((error as DatabaseBehind).databaseVersion).toBeNull();
    expect((error as DatabaseBehind).retryable).toBe(false);
    expect(await checkpointRows('other-database')).toBe(0);
    expect(server.subscriptions).toEqual([]);
    await res.close(server);
  });
});

describe('bounded waits on the checkpoint lock', () => {
  it('a lease waits at most the lock timeout for a holder, then fails retryably', async () => {
    const bounded = createPool(db.url, { max: 2, bounds: BOUNDS });
    await acquireLease(db.pool, 'held');
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await lockCheckpoint(holder, 'held');
      const started = Date.now();
      const failure = await acquireLease(bounded, 'held').catch((e: unknown) => e);
      const waitedMs = Date.now() - started;
      expect(failure).toBeInstanceOf(StorageFailure);
      expect((failure as StorageFailure).sqlState).toBe(SQLSTATE.lockNotAvailable);
      expect((failure as StorageFailure).retryable).toBe(true);
      expect(waitedMs).toBeGreaterThanOrEqual(BOUNDS.lockTimeoutMs);
      expect(waitedMs).toBeLessThan(BOUNDS.lockTimeoutMs + 2_000);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
      await bounded.end();
    }
  });

  it('a holder frozen inside its transaction loses its session (no crash), and the lease goes to the next one', async () => {
    const lost: Error[] = [];
    let restored = 0;
    const bounded = createPool(db.url, {
      max: 2,
      bounds: BOUNDS,
      onConnectionLost: (error) => lost.push(error),
      onConnectionRestored: () => (restored += 1),
    });
    try {
      const before = await acquireLease(bounded, 'frozen');
      // A checked-out client that stops talking inside its transaction, as a SIGSTOPped worker would.
      const frozen = await bounded.connect();
      await frozen.query('BEGIN');
      await lockCheckpoint(frozen, 'frozen');
      const started = Date.now();
      // The server ends the idle transaction's session; the next lease waits on the lock until then at most.
      const taken = await retryUntil(() => acquireLease(db.pool, 'frozen'), 10_000);
      expect(taken.leaseEpoch).toBe(before.leaseEpoch + 1);
      expect(Date.now() - started).toBeLessThan(BOUNDS.idleInTransactionTimeoutMs + BOUNDS.lockTimeoutMs + 3_000);
      // The frozen client, woken, finds its session gone: its query fails; the error event did not go unheard.
      const woken = await frozen.query('SELECT 1').catch((e: unknown) => e);
      expect(woken).toBeInstanceOf(Error);
      frozen.release(woken as Error);
      expect(lost).toHaveLength(1);
      // The pool connects afresh and says so once.
      expect((await acquireLease(bounded, 'frozen')).leaseEpoch).toBe(taken.leaseEpoch + 1);
      expect(restored).toBe(1);
    } finally {
      await bounded.end();
    }
  });

  it('a checked-out client whose backend is terminated reports the loss once and fails only its own query', async () => {
    const lost: Error[] = [];
    const pool = createPool(db.url, { max: 3, onConnectionLost: (error) => lost.push(error) });
    try {
      const clients = await Promise.all([pool.connect(), pool.connect()]);
      const pids = await Promise.all(
        clients.map(async (c) => (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid),
      );
      const pending = clients[0].query('SELECT pg_sleep(30)').catch((e: unknown) => e);
      await db.pool.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [pids]);
      expect(await pending).toBeInstanceOf(Error);
      // The idle checked-out one learns of it only by its error event: wait for the report.
      await retryUntil(
        () => (lost.length > 0 ? Promise.resolve() : Promise.reject(new Error('not reported yet'))),
        5_000,
      );
      for (const client of clients) client.release(new Error('connection lost'));
      expect(lost).toHaveLength(1);
      expect((await pool.query<{ one: number }>('SELECT 1 AS one')).rows[0]!.one).toBe(1);
    } finally {
      await pool.end();
    }
  });
});

describe('one report per outage, wherever it is seen first', () => {
  const terminateSleeper = async (): Promise<void> => {
    // The backend running pg_sleep, as a restart or a crash of the server would end it.
    await retryUntil(async () => {
      const { rowCount } = await db.pool.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(30)%' AND pid <> pg_backend_pid()",
      );
      if (!rowCount) throw new Error('no sleeper yet');
    }, 5_000);
  };

  it.each([
    ['pool.query (the one-statement commit)', (pool: pg.Pool) => pool.query('SELECT pg_sleep(30)')],
    [
      'a transaction (the exact commit path)',
      (pool: pg.Pool) => inTransaction(pool, 'test', 'c', (client) => client.query('SELECT pg_sleep(30)')),
    ],
  ])('a connection lost under a query in flight through %s is reported once, and its return once', async (_, run) => {
    const lost: Error[] = [];
    const restored: number[] = [];
    const pool = createPool(db.url, {
      max: 2,
      onConnectionLost: (error) => lost.push(error),
      onConnectionRestored: (downMs) => restored.push(downMs),
    });
    try {
      const inFlight = run(pool).catch((e: unknown) => e);
      await terminateSleeper();
      const failure = await inFlight;
      expect(failure).toBeInstanceOf(Error);
      expect(isConnectionLoss(failure instanceof StorageFailure ? failure.cause : failure)).toBe(true);
      expect(lost).toHaveLength(1);
      expect(restored).toEqual([]);
      // The next connection is the database back: told once, with how long it was away.
      await pool.query('SELECT 1');
      await pool.query('SELECT 1');
      expect(lost).toHaveLength(1);
      expect(restored).toHaveLength(1);
      expect(restored[0]).toBeGreaterThanOrEqual(0);
    } finally {
      await pool.end();
    }
  });

  it('a database that refuses connections is reported lost once however many checkouts fail', async () => {
    const lost: Error[] = [];
    // A loopback port nothing listens on: every connection is refused, as while Postgres is down.
    const port = await freePort();
    const pool = createPool(`postgres://postgres@127.0.0.1:${port}/nowhere`, {
      onConnectionLost: (error) => lost.push(error),
    });
    try {
      for (let i = 0; i < 3; i++) {
        const error = await pool.query('SELECT 1').catch((e: unknown) => e);
        expect(isConnectionLoss(error)).toBe(true);
      }
      expect(await pool.connect().catch((e: unknown) => e)).toBeInstanceOf(Error);
      expect(lost).toHaveLength(1);
    } finally {
      await pool.end();
    }
  });

  it('a failed statement on a live connection is no outage', async () => {
    const lost: Error[] = [];
    const pool = createPool(db.url, { max: 1, onConnectionLost: (error) => lost.push(error) });
    try {
      await expect(pool.query('SELECT 1/0')).rejects.toThrow(/division by zero/);
      await expect(
        inTransaction(pool, 'test', 'c', (client) => client.query("SELECT 'x'::int")),
      ).rejects.toBeInstanceOf(StorageFailure);
      expect(lost).toEqual([]);
    } finally {
      await pool.end();
    }
  });
});

type Waited = { answered: boolean; waitedMs: number };

describe('waiting for a lost database (the workflow between two runs)', () => {
  const waitFor = (pool: pg.Pool) => {
    const config = loadConfig({ DATABASE_URL: db.url, WHALEHUNT_URL: 'ws://127.0.0.1:9', WHALEHUNT_API_KEY: 'k' });
    const quiet = () => undefined;
    const { waitForDatabase } = createActivities({ pool, config, log: { info: quiet, warn: quiet, error: quiet } });
    return (input: WaitForDatabaseInput) => waitForDatabase(input);
  };

  it('answers once the database does, not before the minimum wait, asking at the poll interval', async () => {
    const heartbeats: unknown[] = [];
    const env = new MockActivityEnvironment();
    env.on('heartbeat', (details: unknown) => heartbeats.push(details));
    const started = Date.now();
    const result: Waited = await env.run(waitFor(db.pool), { minWaitMs: 300, maxWaitMs: 10_000, pollMs: 100 });
    expect(result.answered).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(300);
    expect(result.waitedMs).toBeLessThan(2_000);
    expect(heartbeats.length).toBeGreaterThanOrEqual(1);
  });

  it('a database that refuses every connection is asked until the maximum wait, heartbeating each time', async () => {
    const heartbeats: unknown[] = [];
    const pool = createPool(`postgres://postgres@127.0.0.1:${await freePort()}/nowhere`);
    try {
      const env = new MockActivityEnvironment();
      env.on('heartbeat', (details: unknown) => heartbeats.push(details));
      const result: Waited = await env.run(waitFor(pool), { minWaitMs: 0, maxWaitMs: 600, pollMs: 100 });
      expect(result).toMatchObject({ answered: false });
      expect(result.waitedMs).toBeGreaterThanOrEqual(600);
      expect(heartbeats.length).toBeGreaterThanOrEqual(4);
    } finally {
      await pool.end();
    }
  });
});

/** Calls `fn` until it resolves (each failure retried at once), failing after `withinMs`. */
async function retryUntil<T>(fn: () => Promise<T>, withinMs: number): Promise<T> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    try {
      return await fn();
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
}
