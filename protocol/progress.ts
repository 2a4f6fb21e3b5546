// A consumer's progress against the stream's head, as every display shows it (CLI status, the main job's
// progress line, the workflow's Current Details): one reading, one rate window and one set of formatters, so
// the three show the same numbers written the same way.

/**
 * What the streaming run knew at one moment: the committed position and the latest head it had seen (the hello's
 * head, or a newer batch position), and when. Every figure derived from it is labelled with `at`.
 */
export interface ProgressReading {
  position: number | null;
  head: number | null;
  /** ISO time the reading was taken. */
  at: string;
}

/** A reading as a signal may carry one: anything else is ignored, never allowed to fail the workflow. */
export function isProgressReading(value: unknown): value is ProgressReading {
  if (typeof value !== 'object' || value === null) return false;
  const { position, head, at } = value as Record<string, unknown>;
  const count = (v: unknown): boolean => v === null || (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0);
  return count(position) && count(head) && typeof at === 'string' && !Number.isNaN(Date.parse(at));
}

/**
 * The head is learnt at a session's hello and a live stream commits past it, so the head shown is never behind
 * the committed position (and the lag never negative). Each is null when what it needs is unknown.
 */
export function headAndLagAt(
  position: number | null,
  seenHead: number | null,
): { head: number | null; lag: number | null } {
  const head = seenHead !== null && position !== null ? Math.max(seenHead, position) : seenHead;
  return { head, lag: head !== null && position !== null ? head - position : null };
}

/** A reading whose head is never behind its position. */
export function progressReading(position: number | null, seenHead: number | null, atMs: number): ProgressReading {
  return { position, head: headAndLagAt(position, seenHead).head, at: new Date(atMs).toISOString() };
}

/** The fresher of two readings (either may be missing). */
export function latestReading(a: ProgressReading | null, b: ProgressReading | null): ProgressReading | null {
  if (a === null) return b;
  if (b === null) return a;
  return Date.parse(b.at) > Date.parse(a.at) ? b : a;
}

export interface RateSample {
  /** ms since the epoch */
  at: number;
  position: number;
}

export const RATE_WINDOW_MS = 60_000;

/**
 * Positions committed per second over the last `windowMs`, from (time, position) samples: the movement since
 * the last sample taken at or before the window's start (else the first sample), over the time since that
 * sample. 0 when nothing moved in the window; null with fewer than two samples to measure between. Keeps the
 * samples inside the window plus that one baseline, so its size is bounded by the sampling rate.
 */
export class RateWindow {
  readonly #samples: RateSample[];

  constructor(
    readonly windowMs: number = RATE_WINDOW_MS,
    samples: readonly RateSample[] = [],
  ) {
    this.#samples = [...samples];
  }

  /** A sample older than the newest one is ignored (readings from two sources may arrive out of order). */
  add(atMs: number, position: number | null): void {
    if (position === null) return;
    const last = this.#samples.at(-1);
    if (last && atMs <= last.at) return;
    this.#samples.push({ at: atMs, position });
    this.#prune(atMs);
  }

  addReading(reading: ProgressReading | null): void {
    if (reading) this.add(Date.parse(reading.at), reading.position);
  }

  rate(nowMs: number): number | null {
    const last = this.#samples.at(-1);
    if (!last) return null;
    const start = nowMs - this.windowMs;
    const base = this.#samples.findLast((s) => s.at <= start) ?? this.#samples[0]!;
    if (last.position === base.position) return base === last && this.#samples.length < 2 ? null : 0;
    const span = nowMs - base.at;
    return span > 0 ? ((last.position - base.position) * 1000) / span : null;
  }

  samples(): RateSample[] {
    return [...this.#samples];
  }

  #prune(nowMs: number): void {
    const start = nowMs - this.windowMs;
    // Drop every sample before the latest one at or before the window's start (that one is the baseline).
    let baseline = -1;
    for (let i = 0; i < this.#samples.length; i += 1) if (this.#samples[i]!.at <= start) baseline = i;
    if (baseline > 0) this.#samples.splice(0, baseline);
  }
}

// ---- formats shared by Current Details, `status` and the main job's progress line --------------------------

/** A count with thousands separators; "-" when unknown. */
export function formatCount(value: number | null | undefined): string {
  return value === null || value === undefined ? '-' : groupThousands(String(Math.round(value)));
}

/** "-1234567.5" -> "-1,234,567.5" (by hand: the same output in the workflow sandbox, the worker and the CLI). */
function groupThousands(decimal: string): string {
  const [whole = '0', fraction] = decimal.split('.');
  const grouped = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return fraction === undefined ? grouped : `${grouped}.${fraction}`;
}

/**
 * Journal positions committed per second, one decimal; "-" when unknown. Positions, not events: a position holds one
 * or more events, and with a filter the committed position moves over positions without a matching event too; it
 * is the unit of the lag shown beside it.
 */
export function formatRate(perSecond: number | null): string {
  if (perSecond === null) return '- pos/s';
  return `${groupThousands(perSecond.toFixed(1))} pos/s`;
}

/** A time of day in UTC, as every "as of" label shows it: "07:50:12 UTC". */
export function formatTime(iso: string | null): string {
  if (iso === null) return '-';
  const ms = Date.parse(iso);
  return Number.isNaN(ms) ? iso : `${new Date(ms).toISOString().slice(11, 19)} UTC`;
}

/** The figures of one reading, each formatted. */
export function progressFigures(
  reading: ProgressReading | null,
  rate: number | null,
): { position: string; head: string; lag: string; rate: string; asOf: string } {
  const position = reading?.position ?? null;
  const { head, lag } = headAndLagAt(position, reading?.head ?? null);
  return {
    position: formatCount(position),
    head: formatCount(head),
    lag: formatCount(lag),
    rate: formatRate(rate),
    asOf: reading ? `as of ${formatTime(reading.at)}` : 'no reading yet',
  };
}

/** One line: "position 1,604  head 1,916  lag 312  5.2 pos/s  as of 07:50:12 UTC". */
export function formatProgress(reading: ProgressReading | null, rate: number | null): string {
  const f = progressFigures(reading, rate);
  return `position ${f.position}  head ${f.head}  lag ${f.lag}  ${f.rate}  ${f.asOf}`;
}

// ---- whale alerts, as `status` and Current Details show them ------------------------------------------------

/** A consumer's whale alerts (db summarizeOutbox): waiting to be sent, failed for good, and the oldest wait. */
export interface AlertFigures {
  pending: number;
  dead: number;
  /** Age of the oldest alert waiting to be sent, in seconds; null when none waits. */
  oldestPendingSeconds: number | null;
}

/**
 * What the progress signal carries: a reading, and the consumer's alert figures when the streaming run could read
 * them (absent in signals of older workers, and when the read failed).
 */
export interface ProgressReport extends ProgressReading {
  alerts?: AlertFigures;
  /** On the first report of a lease attempt that took over from one that stopped heartbeating: its number. */
  takeoverAttempt?: number;
}

/** Alert figures as a signal may carry them: anything else is ignored, never allowed to fail the workflow. */
export function isAlertFigures(value: unknown): value is AlertFigures {
  if (typeof value !== 'object' || value === null) return false;
  const { pending, dead, oldestPendingSeconds } = value as Record<string, unknown>;
  const count = (v: unknown): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
  return (
    count(pending) &&
    count(dead) &&
    (oldestPendingSeconds === null ||
      (typeof oldestPendingSeconds === 'number' && Number.isFinite(oldestPendingSeconds)))
  );
}

/** A duration in whole seconds, two units at most: "45s", "2m 05s", "3h 12m", "2d 04h"; "-" when unknown. */
export function formatAge(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '-';
  const s = Math.max(0, Math.floor(seconds));
  const pad = (n: number): string => String(n).padStart(2, '0');
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
  return `${Math.floor(s / 86_400)}d ${pad(Math.floor((s % 86_400) / 3600))}h`;
}

/** "3 pending (oldest 2m 05s), 1 dead": the same words in `status` and Current Details. */
export function formatAlerts(alerts: AlertFigures): string {
  const oldest = alerts.pending > 0 ? ` (oldest ${formatAge(alerts.oldestPendingSeconds)})` : '';
  return `${formatCount(alerts.pending)} pending${oldest}, ${formatCount(alerts.dead)} dead`;
}
