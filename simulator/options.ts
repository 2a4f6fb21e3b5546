// Command-line options of the standalone simulator (simulator/main.ts), validated once with zod.
import { parseArgs } from 'node:util';
import { z } from 'zod';
import type { FaultPlan } from './faults.js';

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
    'drain-old-connections': z.boolean().default(false),
    'conflict-at': int(1).optional(),
    'unknown-kind-at': int(1).optional(),
    'oversize-at': int(1).optional(),
    'page-overlap': int(1).optional(),
    'page-non-advancing': z.boolean().default(false),
    'page-expired': z.boolean().default(false),
  })
  .refine((f) => !(f['refuse-acks'] && f['lose-acks']), {
    message: '--refuse-acks and --lose-acks exclude each other',
  });

const stringFlags = [
  'port',
  'host',
  'seed',
  'transitions',
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
] as const;
const booleanFlags = ['drain-old-connections', 'page-non-advancing', 'page-expired'] as const;

export interface SimulatorConfig {
  port: number;
  host: string;
  seed: number;
  transitions: number;
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
  }
  if (f['refuse-acks'] !== undefined) faults.ack = { mode: 'refuse', count: f['refuse-acks'] };
  if (f['lose-acks'] !== undefined) faults.ack = { mode: 'lose', count: f['lose-acks'] };
  if (f['overload-subscribes'] !== undefined)
    faults.overloadSubscribes = { count: f['overload-subscribes'], retryAfterMs: f['overload-retry-after-ms'] };
  if (f['drain-old-connections']) faults.drainOldConnections = true;
  if (f['conflict-at'] !== undefined) faults.conflictingEventAt = f['conflict-at'];
  if (f['unknown-kind-at'] !== undefined) faults.unknownKindAt = f['unknown-kind-at'];
  if (f['oversize-at'] !== undefined) faults.oversizeFrameAt = f['oversize-at'];
  if (f['page-overlap'] !== undefined) faults.pageOverlap = f['page-overlap'];
  if (f['page-non-advancing']) faults.pageNonAdvancing = true;
  if (f['page-expired']) faults.pageExpired = true;
  return {
    port: f.port,
    host: f.host,
    seed: f.seed,
    transitions: f.transitions,
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
