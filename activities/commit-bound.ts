// A commit that does not finish within its bound (a frozen server, a lost connection the driver has not noticed)
// fails the run instead of leaving it heartbeating a position that no longer moves.

/**
 * Settles like `work`, or rejects with `late()`'s error once `boundMs` has passed (never when `boundMs` is
 * undefined). A result arriving after the bound is dropped: whoever awaited this has already moved on.
 */
export function withinBound<T>(work: Promise<T>, boundMs: number | undefined, late: () => Error): Promise<T> {
  if (boundMs === undefined) return work;
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      // The abandoned work may still fail (its connection is usually gone): that failure is not news.
      work.catch(() => undefined);
      reject(late());
    }, boundMs);
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}
