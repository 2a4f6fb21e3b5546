// What every progress display relies on: one rate over a real window that drops to 0 when nothing moves, one way
// of writing numbers, commands that still paste as one command after wrapping, and a bounded progress signal.
import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { throttledReporter } from '../../activities/progress-reporter.js';
import {
  formatCount,
  formatProgress,
  formatRate,
  headAndLagAt,
  isProgressReading,
  progressReading,
  RateWindow,
  type ProgressReading,
} from '../../protocol/progress.js';
import {
  resolveBindingCommand,
  resolveGapCommand,
  resolveQuarantineCommand,
  resumeCommand,
  wrapShellCommand,
} from '../../workflows/commands.js';

describe('RateWindow', () => {
  it('measures over the last minute and says 0 once nothing moved in it', () => {
    const window = new RateWindow(60_000);
    expect(window.rate(0)).toBeNull();
    window.add(0, 100);
    expect(window.rate(10_000)).toBeNull(); // one sample: nothing to measure between
    window.add(20_000, 300);
    window.add(40_000, 500);
    expect(window.rate(40_000)).toBe(10);
    // Still moving a minute later? No: the last sample at or before the window's start is the last one.
    expect(window.rate(100_000)).toBe(0);
  });

  it('starts the measurement at the last sample at or before the window, not at the first ever', () => {
    const window = new RateWindow(60_000);
    window.add(0, 0);
    window.add(50_000, 1_000); // a replay burst
    window.add(120_000, 1_060); // then slow
    expect(window.rate(120_000)).toBe(60 / 70);
    // The burst is outside the window now: only the baseline sample before it is kept.
    expect(window.samples()).toEqual([
      { at: 50_000, position: 1_000 },
      { at: 120_000, position: 1_060 },
    ]);
  });

  it('keeps its size bounded by the sampling rate and ignores samples older than its newest', () => {
    const window = new RateWindow(60_000);
    for (let at = 0; at <= 3_600_000; at += 2_000) window.add(at, at / 1_000);
    expect(window.samples().length).toBeLessThanOrEqual(32);
    window.add(1_000, 0);
    expect(window.rate(3_600_000)).toBe(1);
  });
});

describe('progress figures', () => {
  it('never shows the head behind the position, nor a negative lag', () => {
    const maybe = fc.option(fc.nat(), { nil: null });
    fc.assert(
      fc.property(maybe, maybe, (position, seenHead) => {
        const { head, lag } = headAndLagAt(position, seenHead);
        if (position === null || seenHead === null) {
          expect({ head, lag }).toEqual({ head: seenHead, lag: null });
        } else {
          expect(head).toBe(Math.max(seenHead, position));
          expect(lag).toBe(head! - position);
          expect(lag).toBeGreaterThanOrEqual(0);
        }
      }),
    );
  });

  it('a reading never carries a head behind its committed position', () => {
    expect(headAndLagAt(1_916, 1_604)).toEqual({ head: 1_916, lag: 0 });
    expect(progressReading(1_916, 1_604, 0)).toEqual({ position: 1_916, head: 1_916, at: '1970-01-01T00:00:00.000Z' });
    expect(headAndLagAt(null, 10)).toEqual({ head: 10, lag: null });
  });

  it('writes counts, rates and a whole reading the same way everywhere', () => {
    expect([formatCount(1_234_567), formatCount(0), formatCount(null)]).toEqual(['1,234,567', '0', '-']);
    expect([formatRate(447.26), formatRate(0), formatRate(1_234.5), formatRate(null)]).toEqual([
      '447.3 pos/s',
      '0.0 pos/s',
      '1,234.5 pos/s',
      '- pos/s',
    ]);
    const reading: ProgressReading = { position: 1_604, head: 1_916, at: '2026-01-01T07:50:12.345Z' };
    expect(formatProgress(reading, 5.2)).toBe('position 1,604  head 1,916  lag 312  5.2 pos/s  as of 07:50:12 UTC');
    expect(formatProgress(null, null)).toBe('position -  head -  lag -  - pos/s  no reading yet');
  });

  it('accepts only well-formed readings from a signal', () => {
    expect(isProgressReading({ position: 1, head: null, at: '2026-01-01T00:00:00Z' })).toBe(true);
    expect(isProgressReading({ position: '1', head: 2, at: '2026-01-01T00:00:00Z' })).toBe(false);
    expect(isProgressReading({ position: 1, head: 2, at: 'yesterday' })).toBe(false);
    expect(isProgressReading(null)).toBe(false);
  });
});

describe('wrapShellCommand', () => {
  const commands = [
    resolveGapCommand('whalehunt-dev', 'from_floor'),
    resolveBindingCommand('whalehunt-dev', 'from_floor'),
    resolveQuarantineCommand('whalehunt-dev', 'release_terminal'),
    resumeCommand("desk 1's"),
    resumeCommand('a-consumer-id-longer-than-the-panel-is-wide-which-cannot-be-split-anywhere-at-all'),
  ];

  /** The arguments bash sees: what a pasted command runs with. */
  function argv(command: string): string[] {
    const out = execFileSync('bash', ['-c', `f() { printf '%s\\0' "$@"; }; f ${command}`], {
      encoding: 'utf8',
    });
    return out.split('\0').slice(0, -1);
  }

  it('keeps every line within the panel (73 characters) unless one word is longer', () => {
    for (const command of commands.slice(0, 4)) {
      const lines = wrapShellCommand(command).split('\n');
      if (command.length > 73) expect(lines.length).toBeGreaterThan(1);
      for (const line of lines) expect(line.length).toBeLessThanOrEqual(73);
    }
    expect(wrapShellCommand(commands[4]!).split('\n')[1]).toBe(
      '  --consumer a-consumer-id-longer-than-the-panel-is-wide-which-cannot-be-split-anywhere-at-all \\',
    );
  });

  it('pastes as the same command: bash sees the same arguments', () => {
    for (const command of commands) expect(argv(wrapShellCommand(command))).toEqual(argv(command));
    expect(argv(commands[3]!)).toContain("desk 1's");
  });

  it('leaves a command that fits alone', () => {
    expect(wrapShellCommand('npx tsx cli/main.ts status --consumer c1')).toBe(
      'npx tsx cli/main.ts status --consumer c1',
    );
  });
});

describe('throttledReporter', () => {
  it('sends at most one reading per interval and one at a time; a failure does not stop later ones', async () => {
    let now = 0;
    const sent: number[] = [];
    const errors: unknown[] = [];
    let release: () => void = () => undefined;
    let fail = false;
    const report = throttledReporter(
      (reading: ProgressReading) => {
        sent.push(reading.position!);
        return new Promise<void>((resolve, reject) => {
          release = fail ? () => reject(new Error('temporal unavailable')) : resolve;
        });
      },
      (error) => errors.push(error),
      20_000,
      () => now,
    );
    const at = (position: number) => ({ position, head: position, at: new Date(now).toISOString() });
    const settle = () => new Promise((resolve) => setImmediate(resolve));
    report(at(1)); // the first reading goes at once
    now = 25_000;
    report(at(2)); // the first signal is still in flight
    await settle();
    release();
    await settle();
    now = 30_000;
    report(at(3));
    await settle();
    release();
    await settle();
    now = 35_000;
    report(at(4)); // within 20 s of the last send
    fail = true;
    now = 50_000;
    report(at(5));
    await settle();
    release();
    await settle();
    now = 70_000;
    report(at(6));
    await settle();
    expect(sent).toEqual([1, 3, 5, 6]);
    expect(errors).toHaveLength(1);
  });
});
