// The whale alert figures (pending, dead, the oldest pending one's age) as `status` and Current Details show
// them: one format, how the streaming run's progress report carries them, and how the workflow's state keeps them.
import { describe, expect, it } from 'vitest';
import { withAlerts } from '../../activities/progress-reporter.js';
import { formatAge, formatAlerts, isAlertFigures } from '../../protocol/progress.js';
import { ConsumerState } from '../../workflows/consumer-state.js';
import type { ConsumerWorkflowInput } from '../../workflows/definitions.js';

describe('alert figures', () => {
  it('writes ages in two units at most and the figures in one line', () => {
    expect([0, 0.4, 59.9, 60, 125, 3599, 3600, 7_380, 86_400, 97_200].map(formatAge)).toEqual([
      '0s',
      '0s',
      '59s',
      '1m 00s',
      '2m 05s',
      '59m 59s',
      '1h 00m',
      '2h 03m',
      '1d 00h',
      '1d 03h',
    ]);
    expect(formatAge(null)).toBe('-');
    expect(formatAge(-3)).toBe('0s'); // a creation time ahead of this clock (skew): never negative
    expect(formatAlerts({ pending: 1_234, dead: 2, oldestPendingSeconds: 65 })).toBe(
      '1,234 pending (oldest 1m 05s), 2 dead',
    );
    expect(formatAlerts({ pending: 0, dead: 0, oldestPendingSeconds: null })).toBe('0 pending, 0 dead');
  });

  it('accepts only well-formed figures from a signal', () => {
    expect(isAlertFigures({ pending: 1, dead: 0, oldestPendingSeconds: 3.5 })).toBe(true);
    expect(isAlertFigures({ pending: 0, dead: 0, oldestPendingSeconds: null })).toBe(true);
    expect(isAlertFigures({ pending: '1', dead: 0, oldestPendingSeconds: null })).toBe(false);
    expect(isAlertFigures({ pending: 1, dead: -1, oldestPendingSeconds: null })).toBe(false);
    expect(isAlertFigures({ pending: 1, dead: 0 })).toBe(false);
    expect(isAlertFigures(undefined)).toBe(false);
  });

  it('the progress report carries the figures read once per report; a failed read sends the reading alone', async () => {
    const reading = { position: 5, head: 9, at: '2026-01-01T00:00:00.000Z' };
    let reads = 0;
    const figures = { pending: 2, dead: 1, oldestPendingSeconds: 30 };
    expect(
      await withAlerts(
        reading,
        () => {
          reads += 1;
          return Promise.resolve({ ...figures, extra: 'not sent' });
        },
        () => undefined,
      ),
    ).toEqual({ ...reading, alerts: figures });
    expect(reads).toBe(1);
    const errors: unknown[] = [];
    expect(
      await withAlerts(
        reading,
        () => Promise.reject(new Error('database down')),
        (e) => errors.push(e),
      ),
    ).toEqual(reading);
    expect(errors).toHaveLength(1);
    expect(await withAlerts(reading, undefined, () => undefined)).toEqual(reading);
  });
});

describe('Current Details shows the alert figures', () => {
  const input: ConsumerWorkflowInput = {
    consumerId: 'c1',
    subscriptionId: 's1',
    filter: {},
    initialStart: 'from_floor',
  };
  const T0 = Date.parse('2026-01-01T00:00:00.000Z');

  it('from the latest report that carried them; a reading without them (a lease end) keeps them', () => {
    const state = new ConsumerState(input);
    expect(state.details(T0)).toContain('| alerts | not reported yet (the streaming run reports them) |');
    state.noteReading({
      position: 10,
      head: 20,
      at: '2026-01-01T00:00:20.000Z',
      alerts: { pending: 3, dead: 1, oldestPendingSeconds: 125 },
    });
    const row = '| alerts | 3 pending (oldest 2m 05s), 1 dead (as of 00:00:20 UTC) |';
    expect(state.details(T0 + 30_000)).toContain(row);
    // An older report and one without figures change nothing; malformed figures are ignored.
    state.noteReading({
      position: 8,
      head: 20,
      at: '2026-01-01T00:00:10.000Z',
      alerts: { pending: 9, dead: 9, oldestPendingSeconds: 1 },
    });
    state.noteReading({ position: 12, head: 20, at: '2026-01-01T00:00:40.000Z' });
    state.noteReading({
      position: 13,
      head: 20,
      at: '2026-01-01T00:00:50.000Z',
      alerts: { pending: -1, dead: 0, oldestPendingSeconds: null },
    });
    expect(state.details(T0 + 60_000)).toContain(row);
    // The progress reading itself stays a plain reading; the figures survive continue-as-new.
    expect(state.progress).toEqual({ position: 13, head: 20, at: '2026-01-01T00:00:50.000Z' });
    const next = new ConsumerState({ ...input, carried: state.carried() });
    expect(next.details(T0 + 60_000)).toContain(row);
    expect(next.status().alerts).toEqual({
      pending: 3,
      dead: 1,
      oldestPendingSeconds: 125,
      at: '2026-01-01T00:00:20.000Z',
    });
    // State carried by an older run has no figures.
    const { alerts: _alerts, ...olderCarried } = state.carried();
    expect(new ConsumerState({ ...input, carried: olderCarried }).alerts).toBeNull();
  });
});
