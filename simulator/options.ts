// Command-line options of the standalone simulator (simulator/main.ts), validated once with zod.
import { parseArgs } from 'node:util';
import { z } from 'zod';
import type { FaultPlan } from './faults.js';
import { DEFAULT_CACHED_RUNS, DEFAULT_RUN_LENGTH } from './journal.js';

export class SimulatorUsageError extends Error {
  override readonly name = 'SimulatorUsageError';
  readonly code = 'invalid_simulator_flags';
}

const int = (min: number) => z.coerce.number().int().min(min);

const flagsSchema = z
  .object({
    port: int(0).max(65535).default(8787),
    host: z.string().min(1).default('127.0.0.1'),
    seed: int(0).default(42),
    transitions: int(0).default(2000),
    'cached-runs': int(1).default(DEFAULT_CACHED_RUNS),
    'live-rate': z.coerce.number().min(0).default(0),
    'api-key': z.array(z.string().min(1)).default([]),
    journal: z.string().min(1).optional(),
    stream: z.string().min(1).default('polymarket'),
    'checkpoint-every': int(1).default(10),
    'live-checkpoint-every': int(1).optional(),
    'live-checkpoint-interval-ms': int(1).default(250),
    'max-unacked': int(1).default(64),
    'slow-consumer-grace-ms': int(0).default(10_000),
    'max-frame-bytes': int(1024).default(1024 * 1024),
    'token-secret': z.string().min(1).optional(),
    'drop-after-frames': int(1).optional(),
    'drop-at-position': int(1).optional(),
    'sequence-fault': z
      .string()
      .regex(/^(duplicate|skip|reorder):\d+$/, 'must be duplicate:N, skip:N or reorder:N')
      .optional(),
    'refuse-acks': int(1).optional(),
    'lose-acks': int(1).optional(),
    'overload-subscribes': int(1).optional(),
    'overload-retry-after-ms': int(0).default(1000),
    'overload-every-subscribe': z.boolean().default(false),
    'sequence-fault-every-session': z.boolean().default(false),
    'malformed-caught-up': z.boolean().default(false),
    'drain-old-connections': z.boolean().default(false),
    'conflict-at': int(1).optional(),
    'unknown-kind-at': int(1).optional(),
    'oversize-at': int(1).optional(),
    'page-overlap': int(1).optional(),
    'page-overlap-omit-cursor': z.boolean().default(false),
    'page-non-advancing': z.boolean().default(false),
    'page-non-advancing-every-page': z.boolean().default(false),
    'page-expired': z.boolean().default(false),
    'page-scan-limit': int(1).optional(),
  })
  .refine((f) => !(f['refuse-acks'] && f['lose-acks']), {
    message: '--refuse-acks and --lose-acks exclude each other',
  })
  .refine((f) => !f['sequence-fault-every-session'] || f['sequence-fault'] !== undefined, {
    message: '--sequence-fault-every-session needs --sequence-fault',
  })
  .refine((f) => !f['page-overlap-omit-cursor'] || f['page-overlap'] !== undefined, {
    message: '--page-overlap-omit-cursor needs --page-overlap',
  });

const stringFlags = [
  'port',
  'host',
  'seed',
  'transitions',
  'cached-runs',
  'live-rate',
  'journal',
  'stream',
  'checkpoint-every',
  'live-checkpoint-every',
  'live-checkpoint-interval-ms',
  'max-unacked',
  'slow-consumer-grace-ms',
  'max-frame-bytes',
  'token-secret',
  'drop-after-frames',
  'drop-at-position',
  'sequence-fault',
  'refuse-acks',
  'lose-acks',
  'overload-subscribes',
  'overload-retry-after-ms',
  'conflict-at',
  'unknown-kind-at',
  'oversize-at',
  'page-overlap',
  'page-scan-limit',
] as const;
const booleanFlags = [
  'overload-every-subscribe',
  'sequence-fault-every-session',
  'malformed-caught-up',
  'drain-old-connections',
  'page-overlap-omit-cursor',
  'page-non-advancing',
  'page-non-advancing-every-page',
  'page-expired',
] as const;

/** Every flag the simulator takes, for `--help`. */
export const SIMULATOR_USAGE = `usage: simulator [options]   (whalehunt-consumer sim [options], npm run sim -- [options])

The reference Whalehunt stream server: the WebSocket stream and the paginated history endpoint on one port.

  --port N                       listen port (default 8787; 0 picks a free one)
  --host HOST                    listen address (default 127.0.0.1)
  --api-key KEY                  an accepted API key (repeatable; default WHALEHUNT_API_KEY)
  --seed N                       journal seed (default 42)
  --transitions N                transitions generated up front (default 2000)
  --cached-runs N                runs of ${DEFAULT_RUN_LENGTH} generated transitions kept in memory, the others regenerated
                                 as they are read (default ${DEFAULT_CACHED_RUNS}: memory against CPU)
  --journal FILE                 load the journal from FILE, or generate it and write it there
  --live-rate N                  generated transitions appended per second (default 0)
  --stream NAME                  stream name (default polymarket)
  --checkpoint-every N           a replay checkpoint every N transitions (default 10)
  --live-checkpoint-every N      a live checkpoint every N transitions (default: --checkpoint-every)
  --live-checkpoint-interval-ms N  ...or this long after the first uncovered live transition (default 250)
  --max-unacked N                unacknowledged checkpoints before delivery pauses (default 64)
  --slow-consumer-grace-ms N     how long the window may stay full before slow_consumer (default 10000)
  --max-frame-bytes N            largest frame (default 1048576)
  --token-secret SECRET          token signing secret (default WHALEHUNT_SIM_TOKEN_SECRET, else from the seed)
  -h, --help                     print this and exit

Faults (one-shot unless noted):
  --drop-after-frames N          drop the first connection that has sent N frames
  --drop-at-position P           drop a connection after the frames of position P
  --sequence-fault MODE:N        duplicate, skip or reorder frameSequence at the N-th frame of a connection
  --sequence-fault-every-session   ...on every connection, not only the next one (recurring)
  --refuse-acks N                refuse the next N ACKs (error overloaded, close)
  --lose-acks N                  ignore the next N ACKs silently
  --overload-subscribes N        answer the next N subscribes with error overloaded
  --overload-every-subscribe     answer every subscribe with error overloaded (recurring)
  --overload-retry-after-ms N    retryAfterMs of those errors (default 1000)
  --malformed-caught-up          every caught_up carries a malformed cut (recurring)
  --drain-old-connections        a superseded connection keeps delivering (persistent)
  --conflict-at P                reuse an earlier eventId with other content at or after P
  --unknown-kind-at P            the first event delivered at or after P has an unknown kind, on every delivery
  --oversize-at P                a frame over --max-frame-bytes at or after P
  --page-overlap N               the next page re-includes N earlier transitions
  --page-overlap-omit-cursor     ...leaving out the events at the cursor's own position
  --page-non-advancing           the next page answers next equal to its cursor
  --page-non-advancing-every-page  every page does (recurring)
  --page-expired                 the next page answers 410 cursor_expired
  --page-scan-limit N            a page scans at most N transitions (default 5000; persistent)
`;

/** True when the arguments ask for the usage text (which needs no other flag to be valid). */
export function wantsHelp(argv: readonly string[]): boolean {
  return argv.includes('--help') || argv.includes('-h');
}

export interface SimulatorConfig {
  port: number;
  host: string;
  seed: number;
  transitions: number;
  cachedRuns: number;
  liveRate: number;
  apiKeys: string[];
  journalFile: string | undefined;
  stream: string;
  checkpointEvery: number;
  liveCheckpointEvery: number;
  liveCheckpointIntervalMs: number;
  maxUnackedCheckpoints: number;
  slowConsumerGraceMs: number;
  maxFrameBytes: number;
  tokenSecret: string;
  faults: FaultPlan;
}

/**
 * Parses the simulator's flags. API keys come from `--api-key` (repeatable) or WHALEHUNT_API_KEY; the token
 * secret from `--token-secret` or WHALEHUNT_SIM_TOKEN_SECRET, else one derived from the seed so that a
 * restarted simulator with the same seed accepts the tokens it issued before.
 */
export function parseSimulatorArgs(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): SimulatorConfig {
  let values: Record<string, unknown>;
  try {
    values = parseArgs({
      args: [...argv],
      options: {
        ...Object.fromEntries(stringFlags.map((name) => [name, { type: 'string' as const }])),
        'api-key': { type: 'string', multiple: true },
        ...Object.fromEntries(booleanFlags.map((name) => [name, { type: 'boolean' as const }])),
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    throw new SimulatorUsageError(err instanceof Error ? err.message : 'invalid flags');
  }
  const parsed = flagsSchema.safeParse(values);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const flag = issue?.path[0];
    throw new SimulatorUsageError(
      `${flag !== undefined ? `--${String(flag)}: ` : ''}${issue?.message ?? 'invalid flags'}`,
    );
  }
  const f = parsed.data;
  const apiKeys = f['api-key'].length > 0 ? f['api-key'] : env.WHALEHUNT_API_KEY ? [env.WHALEHUNT_API_KEY] : [];
  if (apiKeys.length === 0) throw new SimulatorUsageError('--api-key (or WHALEHUNT_API_KEY) is required');
  const faults: FaultPlan = {};
  if (f['drop-after-frames'] !== undefined) faults.dropAfterFrames = f['drop-after-frames'];
  if (f['drop-at-position'] !== undefined) faults.dropAtPosition = f['drop-at-position'];
  if (f['sequence-fault'] !== undefined) {
    const [mode, at] = f['sequence-fault'].split(':') as ['duplicate' | 'skip' | 'reorder', string];
    faults.frameSequence = { mode, atFrame: Number(at) };
    if (f['sequence-fault-every-session']) faults.frameSequence.everySession = true;
  }
  if (f['refuse-acks'] !== undefined) faults.ack = { mode: 'refuse', count: f['refuse-acks'] };
  if (f['lose-acks'] !== undefined) faults.ack = { mode: 'lose', count: f['lose-acks'] };
  if (f['overload-subscribes'] !== undefined)
    faults.overloadSubscribes = { count: f['overload-subscribes'], retryAfterMs: f['overload-retry-after-ms'] };
  if (f['overload-every-subscribe']) faults.overloadEverySubscribe = { retryAfterMs: f['overload-retry-after-ms'] };
  if (f['malformed-caught-up']) faults.malformedCaughtUp = true;
  if (f['drain-old-connections']) faults.drainOldConnections = true;
  if (f['conflict-at'] !== undefined) faults.conflictingEventAt = f['conflict-at'];
  if (f['unknown-kind-at'] !== undefined) faults.unknownKindAt = f['unknown-kind-at'];
  if (f['oversize-at'] !== undefined) faults.oversizeFrameAt = f['oversize-at'];
  if (f['page-overlap'] !== undefined) {
    faults.pageOverlap = f['page-overlap-omit-cursor']
      ? { transitions: f['page-overlap'], omitCursorPosition: true }
      : f['page-overlap'];
  }
  if (f['page-non-advancing']) faults.pageNonAdvancing = true;
  if (f['page-non-advancing-every-page']) faults.pageNonAdvancing = 'every_page';
  if (f['page-expired']) faults.pageExpired = true;
  if (f['page-scan-limit'] !== undefined) faults.pageScanLimit = f['page-scan-limit'];
  return {
    port: f.port,
    host: f.host,
    seed: f.seed,
    transitions: f.transitions,
    cachedRuns: f['cached-runs'],
    liveRate: f['live-rate'],
    apiKeys,
    journalFile: f.journal,
    stream: f.stream,
    checkpointEvery: f['checkpoint-every'],
    liveCheckpointEvery: f['live-checkpoint-every'] ?? f['checkpoint-every'],
    liveCheckpointIntervalMs: f['live-checkpoint-interval-ms'],
    maxUnackedCheckpoints: f['max-unacked'],
    slowConsumerGraceMs: f['slow-consumer-grace-ms'],
    maxFrameBytes: f['max-frame-bytes'],
    tokenSecret: f['token-secret'] ?? env.WHALEHUNT_SIM_TOKEN_SECRET ?? `whalehunt-simulator-seed-${f.seed}`,
    faults,
  };
}
