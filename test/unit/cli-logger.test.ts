import { describe, expect, it } from 'vitest';
import { JsonLogger, parseLogLevel, REDACTED } from '../../worker/logger.js';

const API_KEY = 'wh_live_9f8e7d6c5b4a';

function capture(level: 'DEBUG' | 'INFO' = 'INFO') {
  const lines: string[] = [];
  const logger = new JsonLogger({
    level,
    secrets: [API_KEY],
    write: (line) => lines.push(line),
    now: () => new Date('2026-01-02T03:04:05.000Z'),
  });
  return {
    logger,
    records: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>),
    raw: () => lines.join(''),
  };
}

describe('JsonLogger', () => {
  it('writes one JSON object per line with time, level, message, bindings and fields', () => {
    const { logger, records } = capture();
    logger.child({ component: 'outbox' }).info('alert sent', { outboxId: 7 });
    expect(records()).toEqual([
      { time: '2026-01-02T03:04:05.000Z', level: 'INFO', msg: 'alert sent', component: 'outbox', outboxId: 7 },
    ]);
  });

  it('drops lines below its level', () => {
    const { logger, records } = capture('INFO');
    logger.debug('noise');
    logger.warn('kept');
    expect(records().map((r) => r.level)).toEqual(['WARN']);
  });

  it('never writes the API key: not in fields, nested values, error messages, stacks or secret-named keys', () => {
    const { logger, raw } = capture();
    const error = new Error(`authenticate failed for key ${API_KEY}`);
    logger.error('session failed', {
      error,
      config: { whalehunt: { url: 'ws://x', apiKey: API_KEY } },
      note: `prefix-${API_KEY}-suffix`,
      headers: { Authorization: 'Bearer abc' },
    });
    const text = raw();
    expect(text).not.toContain(API_KEY);
    expect(text).not.toContain('Bearer abc');
    expect(text).toContain(REDACTED);
    expect(text).toContain('authenticate failed for key');
  });

  it('masks passwords in URLs', () => {
    const { logger, raw } = capture();
    logger.info('connected', { databaseUrl: 'postgres://postgres:hunter22@127.0.0.1:5432/whalehunt' });
    expect(raw()).toContain(`postgres://postgres:${REDACTED}@127.0.0.1:5432/whalehunt`);
    expect(raw()).not.toContain('hunter22');
  });

  it('keeps error codes and survives circular metadata and bigints', () => {
    const { logger, records } = capture();
    const error = Object.assign(new Error('fenced'), { code: 'fenced' });
    const loop: Record<string, unknown> = { n: 1n };
    loop.self = loop;
    logger.warn('commit refused', { error, loop });
    const [record] = records();
    expect(record).toMatchObject({
      error: { name: 'Error', message: 'fenced', code: 'fenced' },
      loop: { n: '1', self: '[circular]' },
    });
  });

  it('parses LOG_LEVEL case-insensitively and rejects unknown levels', () => {
    expect(parseLogLevel(undefined)).toBe('INFO');
    expect(parseLogLevel('debug')).toBe('DEBUG');
    expect(parseLogLevel('loud')).toBeNull();
  });
});
