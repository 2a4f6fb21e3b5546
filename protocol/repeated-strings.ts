// One instance per distinct value of a field that repeats from event to event (a trade's market, asset, wallet).
// JSON.parse gives every event its own copy of such a string, and staging holds each event until its checkpoint
// commits: long enough for the young generation's collector to copy it, often twice. Sharing the first copy lets
// the others die young: in the stream bench it took a fifth off what the scavenges copied per event. Values are
// equal either way; only memory tells the copies apart.

/** Distinct values kept at least (the most recently seen); at most twice as many are held. */
export const REPEATED_STRINGS_CAPACITY = 4_096;

export class RepeatedStrings {
  // Two generations, as RecentExecutions keeps rows: a hit costs one or two lookups and nothing more, and a field
  // with more distinct values than the capacity (a wallet per trade) cycles through them without growing.
  #newer = new Map<string, string>();
  #older = new Map<string, string>();

  constructor(private readonly capacity = REPEATED_STRINGS_CAPACITY) {}

  /** The instance of `value` seen first, or `value` itself, which is kept for the next ones. */
  share(value: string): string {
    const newer = this.#newer.get(value);
    if (newer !== undefined) return newer;
    const shared = this.#older.get(value) ?? value;
    this.#newer.set(value, shared);
    if (this.#newer.size >= this.capacity) {
      this.#older = this.#newer;
      this.#newer = new Map();
    }
    return shared;
  }

  /** Values held, for the bound's sake. */
  get size(): number {
    return this.#newer.size + this.#older.size;
  }
}
