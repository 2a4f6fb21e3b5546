import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { headAndLagAt } from '../../protocol/progress.js';

describe('headAndLagAt', () => {
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

  it('a head seen ahead of the position is shown as is', () => {
    expect(headAndLagAt(80, 90)).toEqual({ head: 90, lag: 10 });
    expect(headAndLagAt(95, 90)).toEqual({ head: 95, lag: 0 });
  });
});
