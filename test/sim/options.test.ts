// The standalone simulator's flags: defaults, fault flags, and clear errors for bad input.
import { execFile } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { SIMULATOR_USAGE, SimulatorUsageError, parseSimulatorArgs, wantsHelp } from '../../simulator/options.js';

/** The standalone simulator process with `args`, no API key in its environment. */
function runSimulator(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', fileURLToPath(new URL('../../simulator/main.ts', import.meta.url)), ...args],
      { env: { ...process.env, WHALEHUNT_API_KEY: '' }, timeout: 60_000 },
      (error, stdout, stderr) => resolve({ code: error ? (error.code as number) : 0, stdout, stderr }),
    );
  });
}

describe('parseSimulatorArgs', () => {
  it('applies defaults and reads the API key from the environment when no flag is given', () => {
    const config = parseSimulatorArgs([], { WHALEHUNT_API_KEY: 'env-key' });
    expect(config).toMatchObject({
      port: 8787,
      seed: 42,
      transitions: 2000,
      cachedRuns: 8,
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
        '--cached-runs',
        '3',
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
      cachedRuns: 3,
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
    [['--sequence-fault-every-session', '--api-key', 'k'], /needs --sequence-fault/],
    [['--page-overlap-omit-cursor', '--api-key', 'k'], /needs --page-overlap/],
    [[], /--api-key/],
  ])('rejects %j with a usage error naming the flag', (argv, message) => {
    expect(() => parseSimulatorArgs(argv, {})).toThrow(SimulatorUsageError);
    expect(() => parseSimulatorArgs(argv, {})).toThrow(message);
  });

  it('parses the recurring faults and the page faults of issues 9 and 11', () => {
    const config = parseSimulatorArgs(
      [
        '--api-key',
        'k',
        '--sequence-fault',
        'skip:6',
        '--sequence-fault-every-session',
        '--overload-every-subscribe',
        '--overload-retry-after-ms',
        '50',
        '--malformed-caught-up',
        '--page-overlap',
        '1',
        '--page-overlap-omit-cursor',
        '--page-non-advancing-every-page',
        '--page-scan-limit',
        '3',
      ],
      {},
    );
    expect(config.faults).toEqual({
      frameSequence: { mode: 'skip', atFrame: 6, everySession: true },
      overloadEverySubscribe: { retryAfterMs: 50 },
      malformedCaughtUp: true,
      pageOverlap: { transitions: 1, omitCursorPosition: true },
      pageNonAdvancing: 'every_page',
      pageScanLimit: 3,
    });
  });
});

describe('--help', () => {
  it('is recognised whatever else is on the line, and the usage names every flag', () => {
    expect(wantsHelp(['--port', '1', '--help'])).toBe(true);
    expect(wantsHelp(['-h'])).toBe(true);
    expect(wantsHelp(['--port', '1'])).toBe(false);
    const flags = [
      ...'port host api-key seed transitions cached-runs journal live-rate stream checkpoint-every live-checkpoint-every'.split(
        ' ',
      ),
      ...'live-checkpoint-interval-ms max-unacked slow-consumer-grace-ms max-frame-bytes token-secret'.split(' '),
      ...'drop-after-frames drop-at-position sequence-fault sequence-fault-every-session refuse-acks'.split(' '),
      ...'lose-acks overload-subscribes overload-every-subscribe overload-retry-after-ms malformed-caught-up'.split(
        ' ',
      ),
      ...'drain-old-connections conflict-at unknown-kind-at oversize-at page-overlap page-overlap-omit-cursor'.split(
        ' ',
      ),
      ...'page-non-advancing page-non-advancing-every-page page-expired page-scan-limit help'.split(' '),
    ];
    for (const flag of flags) expect(SIMULATOR_USAGE).toMatch(new RegExp(`--${flag}\\b`));
  });

  // `whalehunt-consumer sim` runs exactly this child, its arguments untouched (the cli-args tests cover that).
  it('the simulator process prints the usage for --help and exits 0, needing no API key', async () => {
    const result = await runSimulator(['--help']);
    expect(result).toEqual({ code: 0, stdout: SIMULATOR_USAGE, stderr: '' });
  }, 60_000);

  it('on a port already taken, says so in one line naming the port and --port, and exits 1', async () => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const { port } = holder.address() as AddressInfo;
    try {
      const result = await runSimulator(['--port', String(port), '--transitions', '5', '--api-key', 'k']);
      expect(result).toEqual({
        code: 1,
        stdout: '',
        stderr: `simulator: port ${port} on 127.0.0.1 is already in use; pick another with --port N (0: a free one)\n`,
      });
    } finally {
      await new Promise((resolve) => holder.close(resolve));
    }
  }, 60_000);
});
