// The standalone simulator's flags: defaults, fault flags, and clear errors for bad input.
import { describe, expect, it } from 'vitest';
import { SimulatorUsageError, parseSimulatorArgs } from '../../simulator/options.js';

describe('parseSimulatorArgs', () => {
  it('applies defaults and reads the API key from the environment when no flag is given', () => {
    const config = parseSimulatorArgs([], { WHALEHUNT_API_KEY: 'env-key' });
    expect(config).toMatchObject({
      port: 8787,
      seed: 42,
      transitions: 2000,
      liveRate: 0,
      apiKeys: ['env-key'],
      checkpointEvery: 10,
      liveCheckpointEvery: 10,
      faults: {},
    });
  });

  it('parses every documented flag, fault flags included', () => {
    const config = parseSimulatorArgs(
      [
        '--port',
        '0',
        '--seed',
        '7',
        '--transitions',
        '50',
        '--live-rate',
        '2.5',
        '--api-key',
        'a',
        '--api-key',
        'b',
        '--journal',
        'j.jsonl',
        '--checkpoint-every',
        '5',
        '--drop-after-frames',
        '9',
        '--drop-at-position',
        '12',
        '--sequence-fault',
        'reorder:4',
        '--lose-acks',
        '2',
        '--overload-subscribes',
        '1',
        '--overload-retry-after-ms',
        '300',
        '--drain-old-connections',
        '--conflict-at',
        '3',
        '--unknown-kind-at',
        '4',
        '--oversize-at',
        '5',
        '--page-overlap',
        '2',
        '--page-non-advancing',
        '--page-expired',
      ],
      {},
    );
    expect(config).toMatchObject({
      port: 0,
      seed: 7,
      transitions: 50,
      liveRate: 2.5,
      apiKeys: ['a', 'b'],
      journalFile: 'j.jsonl',
      checkpointEvery: 5,
    });
    expect(config.faults).toEqual({
      dropAfterFrames: 9,
      dropAtPosition: 12,
      frameSequence: { mode: 'reorder', atFrame: 4 },
      ack: { mode: 'lose', count: 2 },
      overloadSubscribes: { count: 1, retryAfterMs: 300 },
      drainOldConnections: true,
      conflictingEventAt: 3,
      unknownKindAt: 4,
      oversizeFrameAt: 5,
      pageOverlap: 2,
      pageNonAdvancing: true,
      pageExpired: true,
    });
  });

  it.each([
    [['--port', 'abc', '--api-key', 'k'], /--port/],
    [['--bogus', '--api-key', 'k'], /bogus/],
    [['--sequence-fault', 'twice:3', '--api-key', 'k'], /--sequence-fault: must be duplicate:N/],
    [['--refuse-acks', '1', '--lose-acks', '1', '--api-key', 'k'], /exclude each other/],
    [[], /--api-key/],
  ])('rejects %j with a usage error naming the flag', (argv, message) => {
    expect(() => parseSimulatorArgs(argv, {})).toThrow(SimulatorUsageError);
    expect(() => parseSimulatorArgs(argv, {})).toThrow(message);
  });
});
