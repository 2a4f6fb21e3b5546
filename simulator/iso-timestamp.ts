// Timestamps for the reference server's generated events.
const DAY_MS = 86_400_000;
let isoDay = Number.NaN;
let isoDayPrefix = '';

/**
 * new Date(ms).toISOString() for the integer milliseconds the generator makes, with the date part kept from the
 * previous call of the same day: formatting a Date was the largest part of generating an event.
 */
export function isoTimestamp(ms: number): string {
  const day = Math.floor(ms / DAY_MS);
  if (day !== isoDay) {
    isoDay = day;
    const iso = new Date(day * DAY_MS).toISOString();
    isoDayPrefix = iso.slice(0, iso.indexOf('T') + 1);
  }
  const t = ms - day * DAY_MS;
  const two = (n: number) => (n < 10 ? `0${n}` : `${n}`);
  const millis = t % 1000;
  return (
    `${isoDayPrefix}${two(Math.floor(t / 3_600_000))}:${two(Math.floor(t / 60_000) % 60)}:` +
    `${two(Math.floor(t / 1000) % 60)}.${millis < 10 ? `00${millis}` : millis < 100 ? `0${millis}` : millis}Z`
  );
}
