// PROTOCOL.md section 7, the stream rows, end to end through the consumer workflow: real Temporal dev
// server, real Postgres, the reference stream server. Each test asserts the saved rows and the ACKs the
// server accepted.
import { afterAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import { ALL, correction, journalOf, trade, waitForPhase, waitForStatus, withConsumerStack, within } from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();

async function savedState(consumerId: string) {
  const { rows: [checkpoint] } = await db.pool.query<{ position: string | null; version: number; generation: number | null }>(
    'SELECT position, version, generation FROM checkpoints WHERE consumer_id = $1',
    [consumerId],
  );
  const { rows: executions } = await db.pool.query<{ entity_id: string; revision: number; notional: string }>(
    'SELECT entity_id, revision, trim_scale(notional)::text AS notional FROM executions WHERE consumer_id = $1 ORDER BY entity_id',
    [consumerId],
  );
  const { rows: volumes } = await db.pool.query<{ market: string; volume: string; execution_count: number }>(
    'SELECT market, trim_scale(volume)::text AS volume, execution_count FROM market_volumes WHERE consumer_id = $1 ORDER BY market',
    [consumerId],
  );
  return { position: checkpoint?.position == null ? null : Number(checkpoint.position), generation: checkpoint?.generation ?? null, executions, volumes };
}

describe('consumer workflow over the stream', () => {
  const res = useResources();

  it('applies a filtered journal: zero-match checkpoints commit and ACK, a correction changes volume by the difference', async () => {
    const journal = journalOf([
      { events: [trade('e1', 'mA', '0.5', '10')] },
      { events: [trade('x1', 'mB', '0.5', '10')] },
      { events: [trade('x2', 'mB', '0.5', '10')] },
      { events: [trade('x3', 'mB', '0.5', '10')] },
      { events: [trade('x4', 'mB', '0.5', '10')] },
      { events: [correction('e1', 'mA', 2, '0.5', '20')] },
      { events: [trade('x5', 'mB', '0.5', '10'), trade('e2', 'mA', '0.25', '4')] },
    ]);
    await withConsumerStack(res, db, { journal }, async ({ server, startConsumer }) => {
      const handle = await startConsumer({ consumerId: 'stream-1', filter: { markets: ['mA'] } });
      await within(server.waitForAck((a) => a.consumerId === 'stream-1' && a.position === 7), 60_000, 'the ACK of checkpoint 7');
      const status = await waitForStatus(handle, 'committed position 7', (s) => s.committed?.position === 7 || s.runs > 0);
      expect(status.phase).toBe('streaming');
      // Zero matches through 5: checkpoints 2 and 4 still committed and were ACKed.
      expect(server.acks.filter((a) => a.consumerId === 'stream-1').map((a) => a.position)).toEqual(expect.arrayContaining([2, 4, 6, 7]));
      expect(server.rejectedAcks).toEqual([]);
    });
    const saved = await savedState('stream-1');
    expect(saved.position).toBe(7);
    expect(saved.executions).toEqual([
      { entity_id: 'e1', revision: 2, notional: '10' },
      { entity_id: 'e2', revision: 1, notional: '1' },
    ]);
    expect(saved.volumes).toEqual([{ market: 'mA', volume: '11', execution_count: 2 }]);
  });

  afterAll(() => undefined);
  it('replays every recorded history without nondeterminism and no history holds the API key', async () => {
    await expectReplayable();
  });
  void ALL;
  void waitForPhase;
});
