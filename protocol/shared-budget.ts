// A quantity the open runs of one process share: a few runs get the most each, many split the total evenly, none
// gets less than the least. A worker running fifty consumers must not hold fifty times what one consumer may.

/** One run's seat in a SharedBudget: its share of the moment, until it closes. */
export interface BudgetSeat {
  readonly share: () => number;
  /** The run ended: its share goes back to the others (again is harmless). */
  readonly close: () => void;
}

export class SharedBudget {
  #runs = 0;

  constructor(private readonly limits: { total: number; most: number; least: number }) {}

  open(): BudgetSeat {
    this.#runs += 1;
    let open = true;
    return {
      share: () => this.share(),
      close: () => {
        if (open) this.#runs -= 1;
        open = false;
      },
    };
  }

  /** What each open run gets now: total / runs, at most `most`, at least `least`. */
  share(): number {
    const { total, most, least } = this.limits;
    return Math.min(most, Math.max(least, Math.floor(total / Math.max(1, this.#runs))));
  }
}
