// cursor_mismatch and server restarts end to end: the consumer workflow on the real Temporal dev server, real
// Postgres and a real ReferenceStreamServer that is closed and started again on the same port and journal.
// A restart with a new token secret voids every saved token (cursor_mismatch: stop, keep the token, wait for
// an audited binding decision); a restart with the same secret is only a dropped connection (resume). An id
// that already belongs to a page consumer never streams.
import { describe, expect, it } from 'vitest';
import { openPageProgress } from '../../db/pages.js';
import { ReferenceStreamServer, type ReferenceServerOptions } from '../../simulator/server.js';
import { resolveBindingUpdate, statusQuery, type BindingResolution } from '../../workflows/definitions.js';
import { useTestDatabase } from '../support/db.js';
import { useResources, type Resources } from '../support/leaks.js';
import { waitForVisibility } from '../support/temporal.js';
import {
  API_KEY,
  journalOf,
  savedCheckpoint,
  trade,
  updateRejection,
  waitForStatus,
  withConsumerStack,
  within,
} from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();

const SECRET_BEFORE = 'token-secret-before-restart';
const SECRET_AFTER = 'token-secret-after-restart';

async function effects(consumerId: string) {
  const { rows: executions } = await db.pool.query<{ entity_id: string; revision: number }>(
    'SELECT entity_id, revision FROM executions WHERE consumer_id = $1 ORDER BY entity_id',
    [consumerId],
  );
  const { rows: volumes } = await db.pool.query<{ market: string; volume: string; execution_count: number }>(
    'SELECT market, trim_scale(volume)::text AS volume, execution_count FROM market_volumes WHERE consumer_id = $1 ORDER BY market',
    [consumerId],
  );
  return { executions: executions.map((e) => `${e.entity_id}@${e.revision}`), volumes };
}

/**
 * A real restart: closes `old` (every session is cut) and starts a new server on the same port and journal.
 * Only the token secret carries over if the caller passes the same one; ACK and subscription records start empty.
 */
async function restartServer(
  res: Resources,
  old: ReferenceStreamServer,
  options: Partial<Omit<ReferenceServerOptions, 'journal' | 'apiKeys' | 'port'>> & { tokenSecret: string },
): Promise<ReferenceStreamServer> {
  const port = Number(new URL(old.url).port);
  await old.close();
  const restarted = await ReferenceStreamServer.start({
    journal: old.journal,
    apiKeys: [API_KEY],
    checkpointEvery: 2,
    port,
    ...options,
  });
  return res.track(restarted, (s) => s.close(), 'restarted reference stream server');
}

/** Records, at each ACK the server accepts, the position the database had committed by then. */
function watchAcksAgainstCommits(
  server: ReferenceStreamServer,
  consumerId: string,
): Promise<{ acked: number; committed: number }>[] {
  const seen: Promise<{ acked: number; committed: number }>[] = [];
  server.events.on('ack', (ack: { consumerId: string; position: number }) => {
    if (ack.consumerId !== consumerId) return;
    seen.push(savedCheckpoint(db.pool, consumerId).then((row) => ({ acked: ack.position, committed: row.position })));
  });
  return seen;
}

describe('binding and server restarts', () => {
  const res = useResources();

  it('a restart with a new token secret: cursor_mismatch stops with the token kept; retry stops again; from_floor is audited and applies every effect once', async () => {
    const consumerId = 'binding-1';
    const journal = journalOf([1, 2, 3, 4].map((i) => ({ events: [trade(`b${i}`, 'mA', '0.5', '2')] })));
    let restarted: ReferenceStreamServer | undefined;
    let savedBefore: Awaited<ReturnType<typeof savedCheckpoint>> | undefined;
    try {
      await withConsumerStack(
        res,
        db,
        { journal, server: { tokenSecret: SECRET_BEFORE } },
        async ({ server, client, startConsumer }) => {
          const handle = await startConsumer({ consumerId });
          await within(
            server.waitForAck((a) => a.consumerId === consumerId && a.position === 4),
            60_000,
            'the ACK of checkpoint 4',
          );
          savedBefore = await savedCheckpoint(db.pool, consumerId);
          expect(savedBefore.position).toBe(4);

          const serverAfter = (restarted = await restartServer(res, server, { tokenSecret: SECRET_AFTER }));
          const ackChecks = watchAcksAgainstCommits(serverAfter, consumerId);
          const stopped = await waitForStatus(
            handle,
            'phase awaiting_binding_decision',
            (s) => s.phase === 'awaiting_binding_decision',
          );
          expect(stopped.stop?.reason).toContain('cursor_mismatch');
          expect(stopped.stop?.resolveWith).toContain(
            `node dist/cli/main.js resolve-binding --consumer ${consumerId} --decision from_floor`,
          );
          await waitForVisibility(
            client,
            `WhalehuntConsumerId = "${consumerId}" AND WhalehuntPhase = "awaiting_binding_decision"`,
            1,
          );
          // The saved token and position are untouched, and the new server accepted nothing from this consumer.
          expect(await savedCheckpoint(db.pool, consumerId)).toEqual(savedBefore);
          expect(serverAfter.subscriptions.filter((s) => s.consumerId === consumerId)).toEqual([]);
          expect(serverAfter.acks.filter((a) => a.consumerId === consumerId)).toEqual([]);
          expect(serverAfter.rejectedAcks).toEqual([]);

          // An invalid decision never reaches the workflow's history.
          expect(
            await updateRejection(
              handle.executeUpdate(resolveBindingUpdate, {
                args: [{ decision: 'jump', actor: 'ops', reason: 'x' } as unknown as BindingResolution],
              }),
            ),
          ).toMatch(/decision/);

          // retry resumes with the exact saved binding: the new server refuses the token again.
          const connectionsBeforeRetry = serverAfter.connections.length;
          await handle.executeUpdate(resolveBindingUpdate, {
            args: [{ decision: 'retry', actor: 'ops', reason: 'was the old server back?' }],
          });
          const stoppedAgain = await waitForStatus(
            handle,
            'a second cursor_mismatch stop',
            (s) => s.phase === 'awaiting_binding_decision' && s.stop?.since !== stopped.stop?.since,
          );
          expect(stoppedAgain.stop?.reason).toContain('cursor_mismatch');
          expect(serverAfter.connections.length).toBeGreaterThan(connectionsBeforeRetry);
          expect(await savedCheckpoint(db.pool, consumerId)).toEqual(savedBefore);
          expect(serverAfter.acks.filter((a) => a.consumerId === consumerId)).toEqual([]);

          const status = await handle.executeUpdate(resolveBindingUpdate, {
            args: [{ decision: 'from_floor', actor: 'ops', reason: 'the provider rotated its token secret' }],
          });
          expect(status.phase).toBe('streaming');
          await within(
            serverAfter.waitForAck((a) => a.consumerId === consumerId && a.position === 4),
            60_000,
            'the ACK of checkpoint 4 on the new server',
          );
          journal.append({ events: [trade('b5', 'mA', '0.5', '2')] });
          journal.append({ events: [trade('b6', 'mA', '0.5', '2')] });
          const last = await within(
            serverAfter.waitForAck((a) => a.consumerId === consumerId && a.position === 6),
            60_000,
            'the ACK of checkpoint 6',
          );

          const subscriptions = serverAfter.subscriptions.filter((s) => s.consumerId === consumerId);
          expect(subscriptions[0]).toMatchObject({ mode: 'from_floor', startPosition: 0 });
          expect(subscriptions.slice(1).every((s) => s.mode === 'resume')).toBe(true);
          expect(serverAfter.rejectedAcks).toEqual([]);
          // Every ACK the new server accepted names a checkpoint already committed, and the last one is what is saved.
          for (const { acked, committed } of await Promise.all(ackChecks))
            expect(committed).toBeGreaterThanOrEqual(acked);
          expect(await savedCheckpoint(db.pool, consumerId)).toMatchObject({ position: 6, token: last.token });
        },
      );
    } finally {
      if (restarted) await res.close(restarted);
    }
    // The replay from the floor found b1..b4 as duplicates: each execution and its volume counted once.
    expect(await effects(consumerId)).toEqual({
      executions: ['b1@1', 'b2@1', 'b3@1', 'b4@1', 'b5@1', 'b6@1'],
      volumes: [{ market: 'mA', volume: '6', execution_count: 6 }],
    });
    const { rows: decisions } = await db.pool.query<{
      kind: string;
      decision: string;
      actor: string;
      reason: string;
      replaced_token: string | null;
    }>('SELECT kind, decision, actor, reason, replaced_token FROM decisions WHERE consumer_id = $1 ORDER BY id', [
      consumerId,
    ]);
    expect(decisions).toEqual([
      { kind: 'binding', decision: 'retry', actor: 'ops', reason: 'was the old server back?', replaced_token: null },
      {
        kind: 'binding',
        decision: 'from_floor',
        actor: 'ops',
        reason: 'the provider rotated its token secret',
        replaced_token: savedBefore!.token,
      },
    ]);
  });

  it('a restart with the same secret mid-stream: the consumer reconnects and resumes from the committed token, no effect twice', async () => {
    const consumerId = 'restart-1';
    const journal = journalOf([1, 2, 3, 4].map((i) => ({ events: [trade(`r${i}`, 'mA', '0.5', '2')] })));
    let restarted: ReferenceStreamServer | undefined;
    try {
      await withConsumerStack(
        res,
        db,
        // Live transitions are delivered but not checkpointed before the restart: they are staged, never committed.
        {
          journal,
          server: { tokenSecret: SECRET_BEFORE, liveCheckpointEvery: 100, liveCheckpointIntervalMs: 600_000 },
        },
        async ({ server, startConsumer }) => {
          const handle = await startConsumer({ consumerId, leaseMs: 120_000 });
          await within(
            server.waitForSubscription((s) => s.consumerId === consumerId && s.mode === 'resume'),
            60_000,
            'the resumed session',
          );
          await within(
            server.waitForAck(
              (a) =>
                a.consumerId === consumerId &&
                a.position === 4 &&
                a.connectionId === server.subscriptions.at(-1)!.connectionId,
            ),
            60_000,
            'the ACK of the cut',
          );
          const before = await savedCheckpoint(db.pool, consumerId);
          expect(before.position).toBe(4);
          journal.append({ events: [trade('r5', 'mA', '0.5', '2')] });
          journal.append({ events: [trade('r6', 'mA', '0.5', '2')] });

          const serverAfter = (restarted = await restartServer(res, server, { tokenSecret: SECRET_BEFORE }));
          const ackChecks = watchAcksAgainstCommits(serverAfter, consumerId);
          const resumed = await within(
            serverAfter.waitForSubscription((s) => s.consumerId === consumerId),
            60_000,
            'the session on the restarted server',
          );
          expect(resumed).toMatchObject({ mode: 'resume', startPosition: 4, generation: 1 });
          await within(
            serverAfter.waitForAck((a) => a.consumerId === consumerId && a.position === 6),
            60_000,
            'the ACK of checkpoint 6',
          );
          journal.append({ events: [trade('r7', 'mA', '0.5', '2')] });
          const last = await within(
            serverAfter.waitForAck((a) => a.consumerId === consumerId && a.position === 7),
            60_000,
            'the live ACK of 7',
          );

          expect((await handle.query(statusQuery)).phase).toBe('streaming');
          expect(serverAfter.rejectedAcks).toEqual([]);
          for (const { acked, committed } of await Promise.all(ackChecks))
            expect(committed).toBeGreaterThanOrEqual(acked);
          expect(await savedCheckpoint(db.pool, consumerId)).toMatchObject({ position: 7, token: last.token });
        },
      );
    } finally {
      if (restarted) await res.close(restarted);
    }
    expect(await effects(consumerId)).toEqual({
      executions: ['r1@1', 'r2@1', 'r3@1', 'r4@1', 'r5@1', 'r6@1', 'r7@1'],
      volumes: [{ market: 'mA', volume: '7', execution_count: 7 }],
    });
  });

  it('an id that belongs to a page consumer is refused before streaming: the consumer pauses with a ConfigError', async () => {
    const consumerId = 'page-owned-1';
    const journal = journalOf([1, 2].map((i) => ({ events: [trade(`p${i}`, 'mA', '0.5', '2')] })));
    expect((await openPageProgress(db.pool, { consumerId, stream: 'polymarket', filter: {} })).kind).toBe('opened');
    await withConsumerStack(res, db, { journal }, async ({ server, startConsumer }) => {
      const handle = await startConsumer({ consumerId });
      const paused = await waitForStatus(handle, 'phase paused', (s) => s.phase === 'paused');
      expect(paused.stop?.reason).toContain(
        `ConfigError: consumer ${consumerId} is a page consumer, not a stream consumer`,
      );
      expect(server.connections).toEqual([]);
    });
    const { rowCount } = await db.pool.query('SELECT 1 FROM checkpoints WHERE consumer_id = $1', [consumerId]);
    expect(rowCount).toBe(0);
  });

  it('replays every recorded history without nondeterminism and no history holds the API key', async () => {
    await expectReplayable();
  });
});
