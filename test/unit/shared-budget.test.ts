import { describe, expect, it } from 'vitest';
import { stagingBudget } from '../../activities/stream-connection.js';
import { SharedBudget } from '../../protocol/shared-budget.js';

describe('SharedBudget', () => {
  it('gives a few runs the most each and many runs an even share, never below the least', () => {
    const budget = new SharedBudget({ total: 100, most: 40, least: 10 });
    expect(budget.share()).toBe(40);
    const seats = [budget.open(), budget.open()];
    expect(budget.share()).toBe(40);
    seats.push(budget.open());
    expect(budget.share()).toBe(33);
    expect(seats.map((seat) => seat.share())).toEqual([33, 33, 33]);
    seats.push(...Array.from({ length: 17 }, () => budget.open()));
    expect(budget.share()).toBe(10);
    // a run that ends gives its share back, once however often it is closed
    for (const seat of seats.slice(2)) {
      seat.close();
      seat.close();
    }
    expect(budget.share()).toBe(40);
  });
});

describe('stagingBudget', () => {
  it('lets four runs keep STAGING_MAX_EVENTS waiting each, and more runs room for one full group commit', () => {
    const budget = stagingBudget(10_000);
    const seats = Array.from({ length: 4 }, () => budget.open());
    expect(budget.share()).toBe(10_000);
    seats.push(...Array.from({ length: 6 }, () => budget.open()));
    expect(budget.share()).toBe(4_000);
    seats.push(...Array.from({ length: 40 }, () => budget.open()));
    expect(budget.share()).toBe(2_000);
    for (const seat of seats) seat.close();
  });

  it('never raises a small STAGING_MAX_EVENTS', () => {
    const budget = stagingBudget(500);
    const seats = Array.from({ length: 50 }, () => budget.open());
    expect(budget.share()).toBe(500);
    for (const seat of seats) seat.close();
  });
});
