import { describe, expect, it } from 'vitest';
import { filterHash } from '../../protocol/canonical.js';
import { decodeServerFrame, type ServerFrameOf } from '../../protocol/codec.js';
import { ProtocolViolation } from '../../protocol/session-fence.js';
import { StagingBoundExceeded, StagingBuffer, type StagingContext } from '../../protocol/staging.js';
import { FILTER } from './stream-fixtures.js';
import { NO_ACTIONS } from '../../protocol/types.js';

const commit = {
  fence: { leaseEpoch: 1, version: 3 },
  quarantinePolicy: { terminalReasons: [] },
  actions: NO_ACTIONS,
};

function buffer(overrides: Partial<StagingContext> = {}): StagingBuffer {
  return new StagingBuffer({
    binding: {
      consumerId: 'c1',
      subscriptionId: 's1',
      stream: 'polymarket',
      historyId: 'h1',
      filter: FILTER,
      filterHash: filterHash(FILTER),
      generation: 2,
      mappings: {},
    },
    startMode: 'resume',
    startPosition: 10,
    cut: { position: 20, snapshot: [{ position: 15, scope: 'clob', state: 'ok' }] },
    limits: { maxEvents: 100, maxBytes: 1_000_000, maxAgeMs: 1_000 },
    now: () => 0,
    ...overrides,
  });
}

const trade = { market: 'm', asset: 'a', side: 'BUY', price: '0.5', size: '2', wallet: 'w', txHash: '0x' };
const batch = (position: number, ordinals = [1]): ServerFrameOf<'batch'> => ({
  v: 1,
  type: 'batch',
  frameSequence: 1,
  generation: 2,
  position,
  deliveryMode: 'replay',
  sourceEventCount: Math.max(...ordinals),
  matchedEventCount: ordinals.length,
  events: ordinals.map((ordinal) => ({
    ordinal,
    eventId: `e${position}.${ordinal}`,
    kind: 'trade',
    entityId: `x${position}`,
    revision: 1,
    observedAt: '2026-01-01T00:00:00Z',
    data: trade,
  })),
});
const checkpoint = (position: number, batchCount: number, token = `t${position}`): ServerFrameOf<'checkpoint'> => ({
  v: 1,
  type: 'checkpoint',
  frameSequence: 1,
  generation: 2,
  position,
  token,
  batchCount,
});

describe('StagingBuffer', () => {
  it('hands a checkpoint plan with the fence, binding and events, then starts empty', () => {
    const staging = buffer();
    staging.stageBatch(batch(11, [1, 3]));
    const plan = staging.checkpoint(checkpoint(12, 1), commit);
    expect(plan).toMatchObject({
      consumerId: 'c1',
      fence: commit.fence,
      startMode: 'resume',
      checkpoint: { position: 12, token: 't12', generation: 2, cutPosition: 20, cutReached: false },
    });
    expect(plan.events.map((e) => e.eventId)).toEqual(['e11.1', 'e11.3']);
    expect(plan.qualityNotices).toEqual([]);
    expect(staging.size).toEqual({ events: 0, bytes: 0, batches: 0, notices: 0 });
  });

  it('a checkpoint at the previous position with no batches is valid (nothing new up to the cut)', () => {
    const staging = buffer({ cut: { position: 10, snapshot: [] } });
    expect(staging.checkpoint(checkpoint(10, 0), commit).checkpoint).toMatchObject({ position: 10, cutReached: true });
  });

  it('adds the cut snapshot once, on the checkpoint that reaches the cut, merged in journal order', () => {
    const staging = buffer();
    staging.stageQuality({
      v: 1,
      type: 'quality',
      frameSequence: 1,
      generation: 2,
      position: 12,
      scope: 'clob',
      state: 'gap',
      deliveryMode: 'replay',
    });
    expect(staging.checkpoint(checkpoint(20, 0), commit).qualityNotices).toEqual([
      { position: 12, scope: 'clob', state: 'gap' },
      { position: 15, scope: 'clob', state: 'ok' },
    ]);
    const next = staging.checkpoint(checkpoint(25, 0), commit);
    expect(next.qualityNotices).toEqual([]);
    expect(next.checkpoint.cutReached).toBe(true);
  });

  it('refuses a batch at or below the previous checkpoint', () => {
    const staging = buffer();
    staging.checkpoint(checkpoint(13, 0), commit);
    expect(() => staging.stageBatch(batch(13))).toThrow(ProtocolViolation);
    expect(() => staging.stageBatch(batch(13))).toThrow(
      /batch frame at position: 13 is not above the previous batch\/checkpoint position 13/,
    );
  });

  it('refuses a checkpoint behind the previous one', () => {
    const staging = buffer();
    staging.checkpoint(checkpoint(13, 0), commit);
    expect(() => staging.checkpoint(checkpoint(12, 0), commit)).toThrow(/checkpoint frame at position/);
  });

  it('counts a decoded batch at the size of the message it came from, and refuses one beyond maxBytes', () => {
    const message = Buffer.from(JSON.stringify(batch(11, [1, 2])));
    const staging = buffer({ limits: { maxEvents: 100, maxBytes: message.length * 2, maxAgeMs: 1_000 } });
    const decoded = decodeServerFrame(message);
    staging.stageBatch(decoded.frame as ServerFrameOf<'batch'>, decoded.bytes);
    expect(staging.size).toMatchObject({ events: 2, bytes: message.length, batches: 1 });
    // The same events padded with whitespace: a larger message, over the remaining budget.
    const padded = Buffer.from(`${JSON.stringify(batch(12, [1, 2]))}${' '.repeat(message.length)}`);
    const paddedDecoded = decodeServerFrame(padded);
    expect(() => staging.stageBatch(paddedDecoded.frame as ServerFrameOf<'batch'>, paddedDecoded.bytes)).toThrow(
      StagingBoundExceeded,
    );
    // A refused batch leaves nothing of itself staged.
    expect(staging.size).toMatchObject({ events: 2, bytes: message.length, batches: 1 });
  });

  it('measures age from the oldest staged item with the injected clock', () => {
    let now = 100;
    const staging = buffer({ now: () => now });
    staging.checkAge();
    staging.stageBatch(batch(11));
    now = 1_100;
    staging.checkAge();
    now = 1_101;
    expect(() => staging.checkAge()).toThrow(StagingBoundExceeded);
    staging.discard();
    staging.checkAge();
  });
});
