// The worker's database bounds: configurable, the idle-in-transaction one below the heartbeat timeout (each bad
// value named), and a commit bound that gives up on a stalled commit without waiting for it.
import { describe, expect, it } from 'vitest';
import { withinBound } from '../../activities/commit-bound.js';
import { ConfigError, loadConfig } from '../../worker/config.js';

const valid = {
  DATABASE_URL: 'postgres://app@db:5432/whalehunt',
  WHALEHUNT_URL: 'wss://stream.example/v1/stream',
  WHALEHUNT_API_KEY: 'wh-live-8f3b2c1d9e',
};

function problems(env: Record<string, string>): { variable: string; problem: string }[] {
  try {
    loadConfig({ ...valid, ...env });
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

describe('database bounds in the worker configuration', () => {
  it('defaults with the idle-in-transaction bound below the heartbeat timeout; a commit is a lock wait plus a statement', () => {
    const config = loadConfig(valid);
    expect(config.databaseBounds).toEqual({
      lockTimeoutMs: 3_000,
      statementTimeoutMs: 8_000,
      idleInTransactionTimeoutMs: 2_000,
    });
    expect(config.stream.commitBoundMs).toBe(11_000);
  });

  it('takes each bound from the environment', () => {
    const config = loadConfig({
      ...valid,
      DB_LOCK_TIMEOUT_MS: '1000',
      DB_STATEMENT_TIMEOUT_MS: '2000',
      DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: '1500',
    });
    expect(config.databaseBounds).toEqual({
      lockTimeoutMs: 1_000,
      statementTimeoutMs: 2_000,
      idleInTransactionTimeoutMs: 1_500,
    });
    expect(config.stream.commitBoundMs).toBe(3_000);
  });

  it('names every bound that is not a positive integer, and an idle-in-transaction bound not below the heartbeat timeout', () => {
    expect(
      problems({
        DB_LOCK_TIMEOUT_MS: '-1',
        DB_STATEMENT_TIMEOUT_MS: '0',
        DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: '3000',
      }),
    ).toEqual([
      { variable: 'DB_LOCK_TIMEOUT_MS', problem: 'must be a positive integer' },
      { variable: 'DB_STATEMENT_TIMEOUT_MS', problem: 'must be a positive integer' },
      {
        variable: 'DB_IDLE_IN_TRANSACTION_TIMEOUT_MS',
        problem: 'must be below the heartbeat timeout (3000 ms by default)',
      },
    ]);
  });
});

describe('withinBound', () => {
  it('settles like the work when it finishes in time', async () => {
    await expect(withinBound(Promise.resolve(7), 1_000, () => new Error('late'))).resolves.toBe(7);
  });

  it('rejects with the late error while the work is still pending, and swallows its later failure', async () => {
    let fail!: (error: Error) => void;
    const work = new Promise<number>((_, reject) => (fail = reject));
    await expect(withinBound(work, 5, () => new Error('stalled'))).rejects.toThrow('stalled');
    fail(new Error('connection gone'));
    await expect(work).rejects.toThrow('connection gone');
  });
});
