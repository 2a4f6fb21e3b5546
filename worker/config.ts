// The worker's configuration: read from the environment once, validated with zod, and reported as one
// error that names every invalid variable (never a value: one of them is the API key).
import { z } from 'zod';
import { DEFAULT_MAX_FRAME_BYTES } from '../protocol/codec.js';
import {
  DEFAULT_WHALE_ALERT_MAX_AGE_MS,
  QUARANTINE_REASONS,
  whaleAlertRules,
  type QuarantineReason,
} from '../protocol/types.js';
import { DEFAULT_ALERT_CONCURRENCY } from '../activities/outbox.js';
import { DEFAULT_WEBHOOK_TIMEOUT_MS } from '../activities/webhook.js';
import type { ConsumeStreamConfig } from '../activities/stream-ports.js';
import { commitBoundMs, DEFAULT_SESSION_BOUNDS, type SessionBounds } from '../db/session-settings.js';
import { DEFAULT_RETENTION_POLICY, type RetentionPolicy } from '../db/retention.js';
import { DEFAULT_HEARTBEAT_TIMEOUT_MS, DEFAULT_LEASE_MS, TASK_QUEUE } from '../workflows/definitions.js';
import { LOG_FORMATS, LOG_LEVELS, type LogFormat, type LogLevel } from './logger.js';
import { loadTemporalSettings, TemporalSettingsError, type TemporalSettings } from './temporal-connection.js';

export interface WorkerConfig {
  databaseUrl: string;
  /** Bounds on every lock wait, statement and open transaction of the worker's connections. */
  databaseBounds: SessionBounds;
  /** Address, namespace, TLS and API key as the `temporal` CLI reads them (variables and profile file). */
  temporal: TemporalSettings;
  /** Postgres connections this process opens at most (its pool); commits and the outbox queue for one. */
  databasePoolSize: number;
  taskQueue: string;
  /** Activity slots: a streaming lease holds one for its whole length, so this caps the consumers per worker. */
  maxConcurrentActivities: number;
  /** HEAP_GROWTH_PERCENT: the V8 heap's growth between full collections; null leaves V8's own. */
  heapGrowthPercent: number | null;
  /** Everything the streaming activity needs, the API key included (it never leaves the worker process). */
  stream: ConsumeStreamConfig;
  /** The streaming lease a consumer started by this deployment gets (workflow input). */
  leaseMs: number;
  whaleAlert: WhaleAlertConfig;
  /** The paginated history source (docs/protocol.md §8): events asked per page, events per durable chunk. */
  pages: { stream: string; limit: number; chunkSize: number };
  logLevel: LogLevel;
  logFormat: LogFormat;
  /** The /metrics, /healthz and /readyz endpoint; off when METRICS_PORT is unset (0 picks a free port). */
  metrics: { port: number; host: string } | null;
  /** What a maintenance run removes (OUTBOX_RETENTION_DAYS, REVISION_RETENTION_DAYS). */
  retention: RetentionPolicy;
  /** The maintenance Schedule the worker creates at start (MAINTENANCE_EVERY); null: none. */
  maintenance: { every: MaintenanceInterval } | null;
}

/** A Temporal Schedule interval: a whole number of seconds, minutes, hours or days. */
export type MaintenanceInterval = `${number}${'s' | 'm' | 'h' | 'd'}`;

export interface WhaleAlertConfig {
  minNotional: string | null;
  webhookUrl: string | null;
  /** Live events observed longer ago than this raise no alert; null: no bound. */
  maxAgeMs: number | null;
  onReplay: boolean;
  /** POSTs in flight per dispatcher. */
  concurrency: number;
  /** How long one POST may take; a claim's lease is three times this. */
  timeoutMs: number;
  /** Standard Webhooks secrets, current first; empty only when there is no webhook. Never logged. */
  signingSecrets: string[];
}

export class ConfigError extends Error {
  readonly code = 'config_invalid';
  override readonly name = 'ConfigError';
  constructor(readonly problems: { variable: string; problem: string }[]) {
    super(`invalid configuration: ${problems.map((p) => `${p.variable}: ${p.problem}`).join('; ')}`);
  }
}

/**
 * A full collection once the heap has grown 75% past what the last one left: the worker's resident set then follows
 * its live heap (staging included) instead of the replay's allocation rate (bench/results/memory.md). At 50 the
 * worker marked its whole heap half again as often, for about 6% more CPU per streamed event (docs/performance.md,
 * Machine CPU).
 */
export const DEFAULT_HEAP_GROWTH_PERCENT = 75;

const required = (what: string) =>
  z
    .string({ error: `is required (${what})` })
    .trim()
    .min(1, `is required (${what})`);
const positiveInt = (fallback: number) =>
  z.coerce
    .number({ error: 'must be a positive integer' })
    .int('must be a positive integer')
    .positive('must be a positive integer')
    .default(fallback);
/**
 * How far the V8 heap may grow past its live size before the next full collection, in percent (off: V8's own
 * choice, which under a replay's allocation rate lets it reach about four times the live heap).
 */
const heapGrowthPercent = z
  .string()
  .trim()
  .toLowerCase()
  .default(String(DEFAULT_HEAP_GROWTH_PERCENT))
  .pipe(
    z
      .string()
      .regex(/^(off|\d+)$/, 'must be a percentage from 10 to 300, or off')
      .transform((text) => (text === 'off' ? null : Number(text)))
      .refine((p) => p === null || (p >= 10 && p <= 300), 'must be a percentage from 10 to 300, or off'),
  );
const optionalText = z
  .string()
  .trim()
  .transform((s) => (s === '' ? undefined : s))
  .optional();
/**
 * The idle-in-transaction bound: below the heartbeat timeout, so the transaction of a holder frozen inside a commit
 * has ended by the time the attempt that takes over starts.
 */
const idleInTransactionBound = (fallback: number) =>
  positiveInt(fallback).pipe(
    z
      .number()
      .max(
        DEFAULT_HEARTBEAT_TIMEOUT_MS - 1,
        `must be below the heartbeat timeout (${DEFAULT_HEARTBEAT_TIMEOUT_MS} ms by default)`,
      ),
  );
const url = (protocols: RegExp, what: string) =>
  z
    .string()
    .trim()
    .refine((s) => protocols.test(s) && URL.canParse(s), `must be a ${what} URL`);

const PORT_PROBLEM = 'must be a port number (0-65535; 0 picks a free one)';

const DURATION_PROBLEM = 'must be a duration such as 300s, 5m or 1h (0: no bound)';
const DURATION_UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };
/** `0` or a whole number with a unit: no bare number, whose unit a reader would have to guess. */
const duration = z
  .string()
  .trim()
  .regex(/^(0|\d+(ms|s|m|h))$/, DURATION_PROBLEM)
  .transform((text) => {
    const [, amount, unit] = /^(\d+)(ms|s|m|h)?$/.exec(text)!;
    return Number(amount) * (unit === undefined ? 0 : DURATION_UNIT_MS[unit]!);
  });

/** `off`, or a whole number of days (at least 1): how long a kind of row is kept. */
const retentionDays = (fallback: 'off' | number) =>
  z
    .string()
    .trim()
    .toLowerCase()
    .default(String(fallback))
    .pipe(
      z
        .string()
        .regex(/^(off|\d+)$/, 'must be a number of days (at least 1) or off')
        .transform((text) => (text === 'off' ? null : Number(text)))
        .refine((days) => days === null || (days >= 1 && Number.isSafeInteger(days)), 'must be at least 1 day, or off'),
    );
/** `off`, or how often maintenance runs: a whole number with a unit s, m, h or d, above 0. */
const maintenanceEvery = z
  .string()
  .trim()
  .toLowerCase()
  .default('1h')
  .pipe(
    z
      .string()
      .regex(/^(off|\d+(s|m|h|d))$/, 'must be an interval such as 30m, 1h or 1d, or off')
      .refine((text) => text === 'off' || Number.parseInt(text, 10) > 0, 'must be above 0, or off')
      .transform((text) => (text === 'off' ? null : (text as MaintenanceInterval))),
  );

const SECRET_PROBLEM =
  'must be whsec_ followed by the base64 of 24 to 64 random bytes (e.g. whsec_$(openssl rand -base64 32))';
/** A Standard Webhooks secret. The message never repeats the value. */
const signingSecret = z
  .string()
  .trim()
  .refine((text) => {
    const encoded = text.startsWith('whsec_') ? text.slice('whsec_'.length) : '';
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded) || encoded.length % 4 !== 0) return false;
    const bytes = Buffer.from(encoded, 'base64').length;
    return bytes >= 24 && bytes <= 64;
  }, SECRET_PROBLEM);
const booleanText = z
  .string()
  .trim()
  .toLowerCase()
  .pipe(z.enum(['true', 'false', '1', '0'], { error: 'must be true or false' }))
  .transform((text) => text === 'true' || text === '1');

const envSchema = z.object({
  DATABASE_URL: required('a postgres:// connection URL').pipe(url(/^postgres(ql)?:\/\//, 'postgres://')),
  DB_LOCK_TIMEOUT_MS: positiveInt(DEFAULT_SESSION_BOUNDS.lockTimeoutMs),
  DB_STATEMENT_TIMEOUT_MS: positiveInt(DEFAULT_SESSION_BOUNDS.statementTimeoutMs),
  DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: idleInTransactionBound(DEFAULT_SESSION_BOUNDS.idleInTransactionTimeoutMs),
  TASK_QUEUE: z.string().trim().min(1).default(TASK_QUEUE),
  DATABASE_POOL_SIZE: positiveInt(10),
  MAX_CONCURRENT_ACTIVITIES: positiveInt(100),
  HEAP_GROWTH_PERCENT: heapGrowthPercent,
  WHALEHUNT_URL: required('the stream WebSocket URL').pipe(url(/^wss?:\/\//, 'ws:// or wss://')),
  WHALEHUNT_API_KEY: required('the stream API key'),
  MAX_FRAME_BYTES: positiveInt(DEFAULT_MAX_FRAME_BYTES),
  STAGING_MAX_EVENTS: positiveInt(10_000),
  STAGING_MAX_BYTES: positiveInt(16 * 1024 * 1024),
  STAGING_MAX_AGE_MS: positiveInt(60_000),
  LEASE_MS: positiveInt(DEFAULT_LEASE_MS),
  HEARTBEAT_MS: positiveInt(1_000),
  CONNECT_TIMEOUT_MS: positiveInt(10_000),
  RECONNECT_MAX_ATTEMPTS: positiveInt(5),
  RECONNECT_INITIAL_MS: positiveInt(500),
  RECONNECT_MAX_MS: positiveInt(15_000),
  QUARANTINE_TERMINAL_REASONS: z
    .string()
    .default('')
    .transform((list) =>
      list
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== ''),
    )
    .pipe(
      z.array(
        z.enum(QUARANTINE_REASONS as [QuarantineReason, ...QuarantineReason[]], {
          error: `each must be one of ${QUARANTINE_REASONS.join(', ')}`,
        }),
      ),
    ),
  WHALE_ALERT_MIN_NOTIONAL: optionalText.pipe(
    z
      .string()
      .regex(/^\d+(\.\d+)?$/, 'must be a decimal string such as "50000"')
      .optional(),
  ),
  WHALE_ALERT_WEBHOOK_URL: optionalText.pipe(url(/^https?:\/\//, 'http(s)://').optional()),
  WHALE_ALERT_MAX_AGE: duration.default(DEFAULT_WHALE_ALERT_MAX_AGE_MS),
  WHALE_ALERT_ON_REPLAY: booleanText.default(false),
  WHALE_ALERT_CONCURRENCY: positiveInt(DEFAULT_ALERT_CONCURRENCY),
  WHALE_ALERT_TIMEOUT: duration
    .refine((ms) => ms > 0, 'must be a duration above 0, such as 10s')
    .default(DEFAULT_WEBHOOK_TIMEOUT_MS),
  // An empty value is a mistake to report, not "unset": a webhook without its secret would go out unsigned.
  WHALE_ALERT_SIGNING_SECRET: signingSecret.optional(),
  WHALE_ALERT_SIGNING_SECRET_PREVIOUS: signingSecret.optional(),
  PAGE_STREAM: z.string().trim().min(1, 'must not be empty').default('polymarket'),
  // The source may answer up to its own maximum; 10,000 keeps one page's events a bounded allocation.
  PAGE_LIMIT: positiveInt(500).pipe(z.number().max(10_000, 'must be at most 10000 (events per page)')),
  PAGE_CHUNK_SIZE: positiveInt(100).pipe(z.number().max(10_000, 'must be at most 10000 (events per transaction)')),
  LOG_LEVEL: z
    .string()
    .trim()
    .default('INFO')
    .transform((s) => s.toUpperCase())
    .pipe(z.enum(LOG_LEVELS as [LogLevel, ...LogLevel[]], { error: `must be one of ${LOG_LEVELS.join(', ')}` })),
  LOG_FORMAT: z
    .string()
    .trim()
    .default('json')
    .transform((s) => s.toLowerCase())
    .pipe(z.enum(LOG_FORMATS, { error: `must be one of ${LOG_FORMATS.join(', ')}` })),
  METRICS_PORT: optionalText.pipe(
    z
      .string()
      .regex(/^\d{1,5}$/, PORT_PROBLEM)
      .transform(Number)
      .refine((port) => port <= 65_535, PORT_PROBLEM)
      .optional(),
  ),
  METRICS_HOST: z.string().trim().min(1, 'must not be empty').default('0.0.0.0'),
  MAINTENANCE_EVERY: maintenanceEvery,
  OUTBOX_RETENTION_DAYS: retentionDays(DEFAULT_RETENTION_POLICY.outboxDays ?? 'off'),
  REVISION_RETENTION_DAYS: retentionDays(DEFAULT_RETENTION_POLICY.revisionDays ?? 'off'),
});

/** Every variable the worker's configuration reads besides the Temporal ones (`--help` must list each). */
export const CONFIG_VARIABLES = Object.keys(envSchema.shape);

function boundsOf(env: {
  DB_LOCK_TIMEOUT_MS: number;
  DB_STATEMENT_TIMEOUT_MS: number;
  DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: number;
}): SessionBounds {
  return {
    lockTimeoutMs: env.DB_LOCK_TIMEOUT_MS,
    statementTimeoutMs: env.DB_STATEMENT_TIMEOUT_MS,
    idleInTransactionTimeoutMs: env.DB_IDLE_IN_TRANSACTION_TIMEOUT_MS,
  };
}

/** Parses the environment once; throws ConfigError listing every invalid variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): WorkerConfig {
  const parsed = envSchema.safeParse(env);
  const problems = parsed.success
    ? []
    : parsed.error.issues.map((issue) => ({
        variable: String(issue.path[0] ?? '(environment)'),
        problem: issue.message,
      }));
  let temporal: TemporalSettings | null = null;
  try {
    temporal = loadTemporalSettings(env);
  } catch (error) {
    if (!(error instanceof TemporalSettingsError)) throw error;
    problems.push(...error.problems);
  }
  if (parsed.success && parsed.data.WHALE_ALERT_WEBHOOK_URL !== undefined) {
    if (parsed.data.WHALE_ALERT_SIGNING_SECRET === undefined)
      problems.push({
        variable: 'WHALE_ALERT_SIGNING_SECRET',
        problem: `is required with WHALE_ALERT_WEBHOOK_URL (every alert is signed); it ${SECRET_PROBLEM}`,
      });
  }
  if (!parsed.success || temporal === null || problems.length > 0) throw new ConfigError(problems);
  const e = parsed.data;
  const whaleAlert: WhaleAlertConfig = {
    minNotional: e.WHALE_ALERT_MIN_NOTIONAL ?? null,
    webhookUrl: e.WHALE_ALERT_WEBHOOK_URL ?? null,
    maxAgeMs: e.WHALE_ALERT_MAX_AGE === 0 ? null : e.WHALE_ALERT_MAX_AGE,
    onReplay: e.WHALE_ALERT_ON_REPLAY,
    concurrency: e.WHALE_ALERT_CONCURRENCY,
    timeoutMs: e.WHALE_ALERT_TIMEOUT,
    signingSecrets: [e.WHALE_ALERT_SIGNING_SECRET, e.WHALE_ALERT_SIGNING_SECRET_PREVIOUS].filter(
      (secret): secret is string => secret !== undefined,
    ),
  };
  const databaseBounds = boundsOf(e);
  // A commit waits for the checkpoint lock, then runs its statements: past both bounds the run gives it up.
  const commitBound = commitBoundMs(databaseBounds);
  return {
    databaseUrl: e.DATABASE_URL,
    databaseBounds,
    temporal,
    databasePoolSize: e.DATABASE_POOL_SIZE,
    taskQueue: e.TASK_QUEUE,
    maxConcurrentActivities: e.MAX_CONCURRENT_ACTIVITIES,
    heapGrowthPercent: e.HEAP_GROWTH_PERCENT,
    stream: {
      url: e.WHALEHUNT_URL,
      apiKey: e.WHALEHUNT_API_KEY,
      maxFrameBytes: e.MAX_FRAME_BYTES,
      staging: { maxEvents: e.STAGING_MAX_EVENTS, maxBytes: e.STAGING_MAX_BYTES, maxAgeMs: e.STAGING_MAX_AGE_MS },
      quarantinePolicy: { terminalReasons: e.QUARANTINE_TERMINAL_REASONS },
      actions: whaleAlertRules(whaleAlert.minNotional, {
        whaleAlertMaxAgeMs: whaleAlert.maxAgeMs,
        whaleAlertOnReplay: whaleAlert.onReplay,
      }),
      heartbeatEveryMs: e.HEARTBEAT_MS,
      connectTimeoutMs: e.CONNECT_TIMEOUT_MS,
      commitBoundMs: commitBound,
      reconnect: {
        maxAttempts: e.RECONNECT_MAX_ATTEMPTS,
        initialMs: e.RECONNECT_INITIAL_MS,
        maxMs: e.RECONNECT_MAX_MS,
      },
    },
    leaseMs: e.LEASE_MS,
    whaleAlert,
    pages: { stream: e.PAGE_STREAM, limit: e.PAGE_LIMIT, chunkSize: e.PAGE_CHUNK_SIZE },
    logLevel: e.LOG_LEVEL,
    logFormat: e.LOG_FORMAT,
    metrics: e.METRICS_PORT === undefined ? null : { port: e.METRICS_PORT, host: e.METRICS_HOST },
    retention: {
      ...DEFAULT_RETENTION_POLICY,
      outboxDays: e.OUTBOX_RETENTION_DAYS,
      revisionDays: e.REVISION_RETENTION_DAYS,
    },
    maintenance: e.MAINTENANCE_EVERY === null ? null : { every: e.MAINTENANCE_EVERY },
  };
}

/** The configuration as it may be logged: the API keys and any URL password replaced. */
export function redact(config: WorkerConfig): Record<string, unknown> {
  return {
    ...config,
    temporal: config.temporal.summary,
    databaseUrl: maskUrlPassword(config.databaseUrl),
    stream: { ...config.stream, url: maskUrlPassword(config.stream.url), apiKey: '[REDACTED]' },
    whaleAlert: {
      ...config.whaleAlert,
      // A webhook's path and query are often its secret: the origin is enough to tell which receiver.
      webhookUrl: config.whaleAlert.webhookUrl === null ? null : `${new URL(config.whaleAlert.webhookUrl).origin}/…`,
      signingSecrets: config.whaleAlert.signingSecrets.map(() => '[REDACTED]'),
    },
  };
}

function maskUrlPassword(value: string): string {
  return value.replace(/(\b[a-z][a-z0-9+.-]*:\/\/[^/\s:@]+:)[^@\s/]+@/gi, '$1[REDACTED]@');
}
