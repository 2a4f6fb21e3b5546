// Structured JSON logs, one object per line. The logger implements Temporal's Logger interface so the
// SDK's own messages (worker state, activity failures) come out in the same shape and pass through the
// same redaction. Secrets are redacted by value (the API key wherever it appears, even inside an error
// message or a stack) and by key name, and passwords in URLs are masked.
import type { LogLevel, LogMetadata, Logger } from '@temporalio/common';
import { REDACTED, redactSecret } from '../protocol/redact.js';

export type { LogLevel };

const SEVERITY: Record<LogLevel, number> = { TRACE: 10, DEBUG: 20, INFO: 30, WARN: 40, ERROR: 50 };
export const LOG_LEVELS = Object.keys(SEVERITY) as LogLevel[];

export { REDACTED };
/** json: one object per line (for collectors); pretty: `time LEVEL message key=value` (for people). */
export const LOG_FORMATS = ['json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];
/** Field names whose values are never logged, whatever they hold. */
const SECRET_KEY = /^(api[-_]?key|authorization|password|secret|whalehunt_api_key)$/i;
/** user:password@ in any URL-like string (postgres://, https://). */
const URL_PASSWORD = /(\b[a-z][a-z0-9+.-]*:\/\/[^/\s:@]+:)[^@\s/]+@/gi;
// Ignore very short "secrets": replacing every "a" in the logs would redact nothing useful and hide everything.
const MIN_SECRET_LENGTH = 4;

export interface JsonLoggerOptions {
  level?: LogLevel;
  format?: LogFormat;
  /** Values that must never appear in a log line (the API key). */
  secrets?: readonly string[];
  /** Fields added to every line. */
  bindings?: Record<string, unknown>;
  /** Where lines go (default: process.stdout). */
  write?: (line: string) => void;
  now?: () => Date;
}

export class JsonLogger implements Logger {
  readonly level: LogLevel;
  private readonly format: LogFormat;
  private readonly secrets: readonly string[];
  private readonly bindings: Record<string, unknown>;
  private readonly write: (line: string) => void;
  private readonly now: () => Date;

  constructor(options: JsonLoggerOptions = {}) {
    this.level = options.level ?? 'INFO';
    this.format = options.format ?? 'json';
    // Keep each secret's JSON-escaped spelling too: lines are redacted after serialisation.
    this.secrets = [
      ...new Set(
        (options.secrets ?? [])
          .filter((s) => s.length >= MIN_SECRET_LENGTH)
          .flatMap((s) => [s, JSON.stringify(s).slice(1, -1)]),
      ),
    ];
    this.bindings = options.bindings ?? {};
    this.write = options.write ?? ((line) => void process.stdout.write(line));
    this.now = options.now ?? (() => new Date());
  }

  /** A logger that adds `bindings` to every line and shares this one's level, secrets and sink. */
  child(bindings: Record<string, unknown>): JsonLogger {
    return new JsonLogger({
      level: this.level,
      format: this.format,
      secrets: this.secrets,
      bindings: { ...this.bindings, ...bindings },
      write: this.write,
      now: this.now,
    });
  }

  log(level: LogLevel, message: string, meta?: LogMetadata): void {
    if (SEVERITY[level] < SEVERITY[this.level]) return;
    const record: Record<string, unknown> = { time: this.now().toISOString(), level, msg: message, ...this.bindings };
    if (meta) {
      for (const [key, value] of Object.entries(meta)) record[key] = value;
    }
    this.write(`${this.format === 'pretty' ? this.pretty(record) : this.serialise(record)}\n`);
  }

  trace(message: string, meta?: LogMetadata): void {
    this.log('TRACE', message, meta);
  }
  debug(message: string, meta?: LogMetadata): void {
    this.log('DEBUG', message, meta);
  }
  info(message: string, meta?: LogMetadata): void {
    this.log('INFO', message, meta);
  }
  warn(message: string, meta?: LogMetadata): void {
    this.log('WARN', message, meta);
  }
  error(message: string, meta?: LogMetadata): void {
    this.log('ERROR', message, meta);
  }

  /** Removes every configured secret and URL password from `text`. */
  redactText(text: string): string {
    let out = text.replace(URL_PASSWORD, `$1${REDACTED}@`);
    for (const secret of this.secrets) out = redactSecret(out, secret);
    return out;
  }

  /** `time LEVEL message key=value …`; values are JSON, so the same redaction applies as to a JSON line. */
  private pretty(record: Record<string, unknown>): string {
    const { time, level, msg, ...fields } = record;
    const pairs = Object.entries(fields).map(([key, value]) => `${key}=${this.serialise(value, key)}`);
    return this.redactText([time, String(level).padEnd(5), msg, ...pairs].join(' '));
  }

  private serialise(record: unknown, ownKey = ''): string {
    const seen = new WeakSet<object>();
    if (ownKey !== '' && SECRET_KEY.test(ownKey)) return JSON.stringify(REDACTED);
    const json = JSON.stringify(record, (key, value: unknown) => {
      if (key !== '' && SECRET_KEY.test(key)) return REDACTED;
      if (typeof value === 'bigint') return value.toString();
      if (value instanceof Error) return describeError(value);
      if (typeof value === 'object' && value !== null) {
        if (seen.has(value)) return '[circular]';
        seen.add(value);
      }
      return value;
    });
    // Redact the serialised line as a whole: a secret may sit inside any nested string, message or stack.
    return this.redactText(json);
  }
}

function describeError(error: Error): Record<string, unknown> {
  const described: Record<string, unknown> = { name: error.name, message: error.message };
  const code = (error as { code?: unknown }).code;
  if (code !== undefined) described.code = code;
  if (error.stack) described.stack = error.stack;
  if (error.cause !== undefined) described.cause = error.cause;
  return described;
}

/** Parses a LOG_LEVEL value; unknown values are a configuration error for the caller to report. */
export function parseLogLevel(value: string | undefined): LogLevel | null {
  if (value === undefined || value === '') return 'INFO';
  const upper = value.toUpperCase();
  return (LOG_LEVELS as string[]).includes(upper) ? (upper as LogLevel) : null;
}
