// `whalehunt-consumer alerts list|retry|drop` run for real (cli/main.ts's main) against a real database: outbox
// rows of every state written here with SQL, the CLI's output and exit codes, the rows it moved and the audit
// rows it wrote; and the alert figures `status` reads (consumerSummary).
import { describe, expect, it } from 'vitest';
import { main } from '../../cli/main.js';
import { acquireLease, consumerSummary } from '../../db/index.js';
import { useTestDatabase } from '../support/db.js';

const db = useTestDatabase();

interface Seed {
  consumerId: string;
  eventId: string;
  status: 'pending' | 'claimed' | 'done' | 'dead' | 'suppressed' | 'dropped';
  reason?: 'replay' | 'backfill' | 'late' | 'correction';
  attempts?: number;
  lastError?: string;
  /** How long ago the commit wrote the row. */
  ageSeconds?: number;
}

/** Inserts outbox rows as the commit and the dispatcher leave them; returns their ids by event id. */
async function seed(rows: Seed[]): Promise<Record<string, number>> {
  const ids: Record<string, number> = {};
  for (const r of rows) {
    const res = await db.pool.query<{ id: string }>(
      `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, suppressed_reason,
                           attempts, last_error, created_at, claimed_until, completed_at)
       VALUES ($1, 'whale_alert:' || $2, $2, 'whale_alert', $3, $4, $5, $6, $7,
               now() - make_interval(secs => $8),
               CASE WHEN $4 = 'claimed' THEN now() + interval '1 minute' END,
               CASE WHEN $4 = 'done' THEN now() END)
       RETURNING id`,
      [
        r.consumerId,
        r.eventId,
        JSON.stringify({ kind: 'trade', eventId: r.eventId }),
        r.status,
        r.reason ?? null,
        r.attempts ?? 0,
        r.lastError ?? null,
        r.ageSeconds ?? 0,
      ],
    );
    ids[r.eventId] = Number(res.rows[0]!.id);
  }
  return ids;
}

async function cli(...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(
    argv,
    { DATABASE_URL: db.url },
    { out: (t) => void out.push(t), err: (t) => void err.push(t) },
  );
  return { code, stdout: out.join('\n'), stderr: err.join('\n') };
}

async function row(id: number) {
  const res = await db.pool.query<{
    status: string;
    attempts: number;
    idempotency_key: string;
    suppressed_reason: string | null;
    last_error: string | null;
  }>('SELECT status, attempts, idempotency_key, suppressed_reason, last_error FROM outbox WHERE id = $1', [id]);
  return res.rows[0];
}

async function alertDecisions(consumerId: string) {
  const res = await db.pool.query<{ decision: string; actor: string; reason: string; details: unknown }>(
    `SELECT decision, actor, reason, details FROM decisions WHERE consumer_id = $1 AND kind = 'alert' ORDER BY id`,
    [consumerId],
  );
  return res.rows;
}

const WEBHOOK_ERROR = 'webhook https://hooks.example answered HTTP 500';

describe('alerts list', () => {
  it('lists newest first, filters by consumer and state (sent is done, pending includes claimed), --json', async () => {
    const ids = await seed([
      { consumerId: 'list-a', eventId: 'la-pending', status: 'pending', ageSeconds: 125 },
      { consumerId: 'list-a', eventId: 'la-claimed', status: 'claimed', attempts: 1 },
      { consumerId: 'list-a', eventId: 'la-done', status: 'done', attempts: 1 },
      { consumerId: 'list-a', eventId: 'la-dead', status: 'dead', attempts: 10, lastError: WEBHOOK_ERROR },
      { consumerId: 'list-a', eventId: 'la-late', status: 'suppressed', reason: 'late' },
      { consumerId: 'list-a', eventId: 'la-dropped', status: 'dropped' },
      { consumerId: 'list-b', eventId: 'lb-pending', status: 'pending' },
    ]);

    const all = await cli('alerts', 'list', '--consumer', 'list-a');
    expect(all, all.stderr).toMatchObject({ code: 0, stderr: '' });
    const lines = all.stdout.split('\n');
    expect(lines[0]).toMatch(/^ID +CONSUMER +KEY +STATE +ATTEMPTS +AGE +LAST ERROR$/);
    expect(lines.slice(1).map((l) => Number(l.split(' ')[0]))).toEqual(
      ['la-dropped', 'la-late', 'la-dead', 'la-done', 'la-claimed', 'la-pending'].map((e) => ids[e]),
    );
    expect(all.stdout).toMatch(
      new RegExp(`\\n${ids['la-dead']} +list-a +whale_alert:la-dead +dead +10 +\\d+s +${WEBHOOK_ERROR}\\n`),
    );
    expect(all.stdout).toMatch(/whale_alert:la-late +suppressed \(late\) +0 /);
    expect(all.stdout).toMatch(/whale_alert:la-claimed +pending \(being sent\) +1 /);
    expect(all.stdout).toMatch(/whale_alert:la-done +sent +1 /);
    expect(all.stdout).toMatch(/whale_alert:la-pending +pending +0 +2m 0[5-9]s {2}-$/);
    expect(all.stdout).not.toContain('list-b');

    const keys = async (...args: string[]) => {
      const listed = await cli('alerts', 'list', '--json', ...args);
      expect(listed.code, listed.stderr).toBe(0);
      return listed.stdout === ''
        ? []
        : listed.stdout.split('\n').map((l) => (JSON.parse(l) as { idempotencyKey: string }).idempotencyKey);
    };
    expect(await keys('--consumer', 'list-a', '--state', 'pending')).toEqual([
      'whale_alert:la-claimed',
      'whale_alert:la-pending',
    ]);
    expect(await keys('--consumer', 'list-a', '--state', 'sent')).toEqual(['whale_alert:la-done']);
    expect(await keys('--consumer', 'list-a', '--state', 'suppressed')).toEqual(['whale_alert:la-late']);
    expect(await keys('--consumer', 'list-a', '--state', 'dropped')).toEqual(['whale_alert:la-dropped']);
    expect(await keys('--state', 'pending')).toEqual([
      'whale_alert:lb-pending',
      'whale_alert:la-claimed',
      'whale_alert:la-pending',
    ]);
    expect(await keys('--consumer', 'list-a', '--limit', '2')).toEqual([
      'whale_alert:la-dropped',
      'whale_alert:la-late',
    ]);
    expect(await keys('--consumer', 'nobody')).toEqual([]);

    const dead = await cli('alerts', 'list', '--consumer', 'list-a', '--state', 'dead', '--json');
    const parsed = JSON.parse(dead.stdout) as Record<string, unknown>;
    expect(parsed).toEqual({
      id: ids['la-dead'],
      consumerId: 'list-a',
      idempotencyKey: 'whale_alert:la-dead',
      eventId: 'la-dead',
      action: 'whale_alert',
      state: 'dead',
      status: 'dead',
      suppressedReason: null,
      attempts: 10,
      lastError: WEBHOOK_ERROR,
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) as unknown,
      availableAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) as unknown,
      completedAt: null,
      payload: { kind: 'trade', eventId: 'la-dead' },
    });
    const claimed = await cli('alerts', 'list', '--consumer', 'list-a', '--state', 'pending', '--json');
    expect(claimed.stdout.split('\n').map((l) => JSON.parse(l) as { state: string; status: string })).toEqual([
      expect.objectContaining({ state: 'pending', status: 'claimed' }),
      expect.objectContaining({ state: 'pending', status: 'pending' }),
    ]);

    const none = await cli('alerts', 'list', '--consumer', 'nobody');
    expect(none).toMatchObject({ code: 0, stdout: 'no alerts match' });
  });

  it('needs DATABASE_URL only (no Temporal): without it, a configuration error (exit 2)', async () => {
    const err: string[] = [];
    const code = await main(['alerts', 'list'], {}, { out: () => undefined, err: (t) => void err.push(t) });
    expect(code).toBe(2);
    expect(err).toEqual(['error (config_invalid): alerts reads the database: set DATABASE_URL']);
  });
});

describe('alerts retry and drop', () => {
  it('retry --id: a dead alert is pending again with attempts 0 and the same key, audited as an alert decision', async () => {
    const ids = await seed([
      { consumerId: 'retry-a', eventId: 'ra-dead', status: 'dead', attempts: 10, lastError: WEBHOOK_ERROR },
      { consumerId: 'retry-a', eventId: 'ra-replay', status: 'suppressed', reason: 'replay' },
      { consumerId: 'retry-a', eventId: 'ra-done', status: 'done', attempts: 1 },
    ]);
    const id = ids['ra-dead']!;
    const retried = await cli('alerts', 'retry', '--id', String(id), '--actor', 'ops@example', '--reason', 'fixed');
    expect(retried, retried.stderr).toMatchObject({ code: 0, stderr: '' });
    expect(retried.stdout).toBe(
      [
        `1 alert(s) pending again (attempts from 0, same idempotency keys): ids ${id}`,
        'audited: alert decision retry by ops@example: fixed',
      ].join('\n'),
    );
    expect(await row(id)).toEqual({
      status: 'pending',
      attempts: 0,
      idempotency_key: 'whale_alert:ra-dead',
      suppressed_reason: null,
      last_error: null,
    });
    expect(await alertDecisions('retry-a')).toEqual([
      {
        decision: 'retry',
        actor: 'ops@example',
        reason: 'fixed',
        details: { alerts: [{ id, key: 'whale_alert:ra-dead', from: 'dead' }] },
      },
    ]);

    // A suppressed one is sent anyway; a sent one among the named ids is left alone, and says so.
    const both = await cli(
      'alerts',
      'retry',
      '--id',
      String(ids['ra-replay']),
      '--id',
      String(ids['ra-done']),
      '--actor',
      'ops',
      '--reason',
      'send it anyway',
    );
    expect(both.code, both.stderr).toBe(0);
    expect(both.stdout).toContain(
      `1 alert(s) pending again (attempts from 0, same idempotency keys): ids ${ids['ra-replay']}`,
    );
    expect(both.stdout).toContain(`left alone: ids ${ids['ra-done']} (not dead or suppressed)`);
    expect(await row(ids['ra-replay']!)).toMatchObject({ status: 'pending', suppressed_reason: null });
    expect(await row(ids['ra-done']!)).toMatchObject({ status: 'done', attempts: 1 });
  });

  it('retry --all-dead --consumer moves only that consumer’s dead alerts', async () => {
    const ids = await seed([
      { consumerId: 'all-a', eventId: 'aa-1', status: 'dead', attempts: 10, lastError: WEBHOOK_ERROR },
      {
        consumerId: 'all-a',
        eventId: 'aa-2',
        status: 'dead',
        attempts: 3,
        lastError: 'webhook https://x answered HTTP 410',
      },
      { consumerId: 'all-a', eventId: 'aa-3', status: 'suppressed', reason: 'backfill' },
      { consumerId: 'all-b', eventId: 'ab-1', status: 'dead', attempts: 10, lastError: WEBHOOK_ERROR },
    ]);
    const retried = await cli(
      'alerts',
      'retry',
      '--all-dead',
      '--consumer',
      'all-a',
      '--actor',
      'ops',
      '--reason',
      'receiver back',
    );
    expect(retried, retried.stderr).toMatchObject({ code: 0 });
    expect(retried.stdout).toContain(
      `2 alert(s) pending again (attempts from 0, same idempotency keys): ids ${ids['aa-1']}, ${ids['aa-2']}`,
    );
    expect(await row(ids['aa-1']!)).toMatchObject({
      status: 'pending',
      attempts: 0,
      idempotency_key: 'whale_alert:aa-1',
    });
    expect(await row(ids['aa-2']!)).toMatchObject({ status: 'pending', attempts: 0 });
    // --all-dead is about dead alerts only: a suppressed one stays suppressed; another consumer's stays dead.
    expect(await row(ids['aa-3']!)).toMatchObject({ status: 'suppressed', suppressed_reason: 'backfill' });
    expect(await row(ids['ab-1']!)).toMatchObject({ status: 'dead', attempts: 10 });
    expect(await alertDecisions('all-a')).toEqual([
      expect.objectContaining({ decision: 'retry', actor: 'ops', reason: 'receiver back' }),
    ]);
    expect(await alertDecisions('all-b')).toEqual([]);
  });

  it('drop: pending or dead alerts are dropped and audited; nothing matched is exit 1 naming the states it takes', async () => {
    const ids = await seed([
      { consumerId: 'drop-a', eventId: 'da-pending', status: 'pending' },
      { consumerId: 'drop-a', eventId: 'da-dead', status: 'dead', attempts: 10, lastError: WEBHOOK_ERROR },
      { consumerId: 'drop-a', eventId: 'da-claimed', status: 'claimed', attempts: 1 },
      { consumerId: 'drop-a', eventId: 'da-suppressed', status: 'suppressed', reason: 'correction' },
    ]);
    const dropped = await cli(
      'alerts',
      'drop',
      '--id',
      String(ids['da-pending']),
      '--id',
      String(ids['da-dead']),
      '--actor',
      'ops',
      '--reason',
      'stale signal',
    );
    expect(dropped, dropped.stderr).toMatchObject({ code: 0 });
    expect(dropped.stdout).toBe(
      [
        `2 alert(s) dropped (never sent): ids ${ids['da-pending']}, ${ids['da-dead']}`,
        'audited: alert decision drop by ops: stale signal',
      ].join('\n'),
    );
    expect(await row(ids['da-pending']!)).toMatchObject({ status: 'dropped' });
    expect(await row(ids['da-dead']!)).toMatchObject({ status: 'dropped' });
    expect(await alertDecisions('drop-a')).toEqual([
      expect.objectContaining({ decision: 'drop', actor: 'ops', reason: 'stale signal' }),
    ]);

    // Being sent, suppressed, already dropped, or no such row: nothing to drop.
    const nothing = await cli(
      'alerts',
      'drop',
      '--id',
      String(ids['da-claimed']),
      '--id',
      String(ids['da-suppressed']),
      '--id',
      String(ids['da-pending']),
      '--id',
      '999999',
      '--actor',
      'ops',
      '--reason',
      'again',
    );
    expect(nothing.code).toBe(1);
    expect(nothing.stdout).toBe('');
    expect(nothing.stderr).toBe(
      `error (nothing_matched): alerts drop: nothing matched: none of alerts ${ids['da-claimed']}, ${ids['da-suppressed']}, ${ids['da-pending']}, 999999 is pending or dead; drop takes pending or dead alerts, not one being sent (see: whalehunt-consumer alerts list)`,
    );
    const noDead = await cli(
      'alerts',
      'retry',
      '--all-dead',
      '--consumer',
      'drop-a',
      '--actor',
      'ops',
      '--reason',
      'x',
    );
    expect(noDead.code).toBe(1);
    expect(noDead.stderr).toBe(
      'error (nothing_matched): alerts retry: nothing matched: no dead alerts of consumer drop-a; retry takes dead or suppressed alerts (see: whalehunt-consumer alerts list)',
    );
    const one = await cli('alerts', 'retry', '--id', String(ids['da-claimed']), '--actor', 'ops', '--reason', 'x');
    expect(one).toMatchObject({ code: 1, stdout: '' });
    expect(one.stderr).toBe(
      `error (nothing_matched): alerts retry: nothing matched: alert ${ids['da-claimed']} is not dead or suppressed; retry takes dead or suppressed alerts (see: whalehunt-consumer alerts list)`,
    );
    // Nothing moved, nothing audited.
    expect(await alertDecisions('drop-a')).toHaveLength(1);
    expect(await row(ids['da-claimed']!)).toMatchObject({ status: 'claimed' });
  });

  it('a usage error is exit 2 before the database is touched', async () => {
    const err: string[] = [];
    const code = await main(
      ['alerts', 'retry', '--id', '1', '--actor', 'ops'],
      { DATABASE_URL: db.url },
      { out: () => undefined, err: (t) => void err.push(t) },
    );
    expect(code).toBe(2);
    expect(err).toEqual(['error: alerts: --reason is required', 'see: whalehunt-consumer alerts --help']);
  });
});

describe('the alert figures status shows', () => {
  it('consumerSummary reads pending (with claimed), dead and the age of the oldest pending alert', async () => {
    const consumerId = 'status-a';
    await acquireLease(db.pool, consumerId);
    expect((await consumerSummary(db.pool, consumerId))?.alerts).toEqual({
      pending: 0,
      dead: 0,
      oldestPendingSeconds: null,
    });
    await seed([
      { consumerId, eventId: 'sa-old', status: 'pending', ageSeconds: 600 },
      { consumerId, eventId: 'sa-claimed', status: 'claimed', attempts: 1, ageSeconds: 30 },
      { consumerId, eventId: 'sa-dead', status: 'dead', attempts: 10, lastError: WEBHOOK_ERROR, ageSeconds: 9_000 },
      { consumerId, eventId: 'sa-done', status: 'done', ageSeconds: 99_999 },
      { consumerId, eventId: 'sa-replay', status: 'suppressed', reason: 'replay', ageSeconds: 99_999 },
      { consumerId: 'status-b', eventId: 'sb-old', status: 'pending', ageSeconds: 99_999 },
    ]);
    const summary = await consumerSummary(db.pool, consumerId);
    expect(summary).toMatchObject({ pendingOutbox: 2, alerts: { pending: 2, dead: 1 } });
    expect(summary!.alerts.oldestPendingSeconds).toBeGreaterThanOrEqual(600);
    expect(summary!.alerts.oldestPendingSeconds).toBeLessThan(660);
  });
});
