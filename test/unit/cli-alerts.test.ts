// `whalehunt-consumer alerts`, the pure parts: argument parsing and its usage errors, help, the list table and
// the --json shape.
import { describe, expect, it } from 'vitest';
import { CliUsageError, commandHelp, generalHelp, parseCommand } from '../../cli/args.js';
import { alertJson, formatAlertsTable } from '../../cli/format.js';
import type { OutboxRow } from '../../db/index.js';

function usageError(argv: string[]): CliUsageError {
  try {
    parseCommand(argv);
  } catch (error) {
    if (error instanceof CliUsageError) return error;
    throw error;
  }
  throw new Error(`expected a usage error for ${argv.join(' ')}`);
}

const audit = ['--actor', 'ops', '--reason', 'receiver fixed'];

describe('alerts arguments', () => {
  it('parses list with its defaults, filters and --json', () => {
    expect(parseCommand(['alerts', 'list'])).toEqual({
      command: 'alerts',
      action: 'list',
      consumerId: undefined,
      state: undefined,
      limit: 50,
      json: false,
    });
    expect(parseCommand(['alerts', 'list', '--consumer', 'c1', '--state', 'sent', '--limit', '5', '--json'])).toEqual({
      command: 'alerts',
      action: 'list',
      consumerId: 'c1',
      state: 'sent',
      limit: 5,
      json: true,
    });
  });

  it('parses retry and drop by ids (repeated, deduplicated) or --all-dead, with the audit', () => {
    expect(parseCommand(['alerts', 'retry', '--id', '7', '--id', '3', '--id', '7', ...audit])).toEqual({
      command: 'alerts',
      action: 'retry',
      selection: { ids: [7, 3] },
      actor: 'ops',
      reason: 'receiver fixed',
    });
    expect(parseCommand(['alerts', 'drop', '--all-dead', '--consumer', 'c1', ...audit])).toMatchObject({
      action: 'drop',
      selection: { allDead: true, consumerId: 'c1' },
    });
    expect(parseCommand(['alerts', 'retry', '--all-dead', ...audit])).toMatchObject({
      selection: { allDead: true },
    });
  });

  it('usage errors name the option and what was wrong', () => {
    expect(usageError(['alerts'])).toMatchObject({
      message: 'alerts: missing action (list, retry or drop)',
      command: 'alerts',
    });
    expect(usageError(['alerts', 'resend']).message).toBe('alerts: unknown action "resend" (list, retry or drop)');
    expect(usageError(['alerts', 'list', '--state', 'done']).message).toBe(
      'alerts: invalid --state "done"; expected one of pending, dead, sent, suppressed, dropped',
    );
    expect(usageError(['alerts', 'list', '--limit', '0']).message).toBe('alerts: --limit must be at least 1');
    expect(usageError(['alerts', 'list', '--limit', 'all']).message).toBe('alerts: --limit must be an integer');
    expect(usageError(['alerts', 'list', '--consumer', 'a b']).message).toContain('--consumer use 1-128 characters');
    expect(usageError(['alerts', 'retry', ...audit]).message).toBe(
      'alerts retry: which alerts? give --id N (repeatable) or --all-dead',
    );
    expect(usageError(['alerts', 'drop', '--id', '1', '--all-dead', ...audit]).message).toBe(
      'alerts drop: give either --id or --all-dead, not both',
    );
    expect(usageError(['alerts', 'retry', '--id', '1', '--consumer', 'c1', ...audit]).message).toBe(
      'alerts retry: --consumer goes with --all-dead (an --id names one alert of any consumer)',
    );
    for (const bad of ['0', '-1', 'x', '1.5', '']) {
      expect(usageError(['alerts', 'retry', '--id', bad, ...audit]).message).toMatch(/^alerts: --id must be/);
    }
    expect(usageError(['alerts', 'retry', '--id', '1', '--reason', 'r']).message).toBe('alerts: --actor is required');
    expect(usageError(['alerts', 'drop', '--id', '1', '--actor', 'ops', '--reason', ' ']).message).toBe(
      'alerts: --reason must not be empty',
    );
    expect(usageError(['alerts', 'list', '--actor', 'ops']).message).toMatch(/^alerts: Unknown option '--actor'/);
  });

  it('help lists the command and its three forms; alerts --help is its help', () => {
    expect(parseCommand(['alerts', '--help'])).toEqual({ command: 'help', topic: 'alerts' });
    expect(parseCommand(['alerts', 'retry', '--help'])).toEqual({ command: 'help', topic: 'alerts' });
    expect(parseCommand(['help', 'alerts'])).toEqual({ command: 'help', topic: 'alerts' });
    expect(generalHelp()).toMatch(/\n {2}alerts +whale alerts in the outbox/);
    const help = commandHelp('alerts');
    expect(help).toContain('usage: whalehunt-consumer alerts list [--consumer ID] [--state pending|dead|sent|');
    expect(help).toContain('alerts retry (--id N [--id N ...] | --all-dead [--consumer ID]) [--actor NAME]');
    expect(help).toContain('alerts drop (--id N [--id N ...] | --all-dead [--consumer ID]) [--actor NAME]');
    expect(help).toContain('--all-dead');
  });
});

function row(overrides: Partial<OutboxRow>): OutboxRow {
  return {
    id: 1,
    consumerId: 'c1',
    idempotencyKey: 'whale_alert:e1',
    eventId: 'e1',
    action: 'whale_alert',
    status: 'pending',
    suppressedReason: null,
    attempts: 0,
    lastError: null,
    createdAt: '2026-01-01T00:00:00.000Z',
    availableAt: '2026-01-01T00:00:00.000Z',
    completedAt: null,
    payload: { kind: 'trade' },
    ...overrides,
  };
}

describe('alerts list rendering', () => {
  const now = Date.parse('2026-01-01T01:02:03.000Z');

  it('shows id, consumer, key, state with the suppressed reason, attempts, age and the error as stored', () => {
    const text = formatAlertsTable(
      [
        row({
          id: 12,
          status: 'dead',
          attempts: 10,
          lastError: 'webhook https://hooks.example answered HTTP 500',
          idempotencyKey: 'whale_alert:e12',
        }),
        row({ id: 11, status: 'suppressed', suppressedReason: 'late' }),
        row({ id: 10, status: 'claimed', attempts: 1, createdAt: '2026-01-01T01:01:00.000Z' }),
        row({ id: 9, status: 'done', attempts: 1 }),
      ],
      now,
    );
    const lines = text.split('\n');
    expect(lines[0]).toMatch(/^ID {2}CONSUMER {2}KEY +STATE +ATTEMPTS {2}AGE +LAST ERROR$/);
    expect(lines[1]).toMatch(
      /^12 {2}c1 +whale_alert:e12 +dead +10 +1h 02m {2}webhook https:\/\/hooks\.example answered HTTP 500$/,
    );
    expect(lines[2]).toMatch(/^11 +c1 +whale_alert:e1 +suppressed \(late\) +0 +1h 02m {2}-$/);
    expect(lines[3]).toMatch(/^10 .* pending \(being sent\) +1 +1m 03s {2}-$/);
    expect(lines[4]).toMatch(/^9 .* sent +1 /);
  });

  it('--json gives the row with its state in the CLI words beside the stored status', () => {
    expect(alertJson(row({ status: 'done' }))).toMatchObject({ state: 'sent', status: 'done' });
    expect(alertJson(row({ status: 'claimed' }))).toMatchObject({ state: 'pending', status: 'claimed' });
    expect(alertJson(row({ status: 'suppressed', suppressedReason: 'replay' }))).toMatchObject({
      state: 'suppressed',
      suppressedReason: 'replay',
      idempotencyKey: 'whale_alert:e1',
      payload: { kind: 'trade' },
    });
  });
});
