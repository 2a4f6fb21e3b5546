// TEST-ONLY: kill -9 of the worker at a cut point of the paginated history run (docs/protocol.md §8), the page
// counterpart of WHALEHUNT_TEST_CRASH_AT. `<point>:<position>` SIGKILLs the process the first time the point is
// reached at or past `position`:
//   beforePageChunk   before the transaction of the chunk whose last position is at or past it
//   afterPageChunk    after that chunk committed (its receipts, effects and applied_position are durable)
//   beforePageBarrier every event of the page is durable, its `next` not yet saved
//   afterPageBarrier  the cursor swap committed
//   beforeHandoverCommit  the backfill reached its target and hands over: inside the handover's transaction (page
//                     progress deleted, checkpoint row inserted), before its commit, applied position at or past it
import type { PageConsumerHooks } from '../activities/page-consumer.js';
import { ConfigError } from './config.js';
import type { JsonLogger } from './logger.js';

export const PAGE_CRASH_AT_VARIABLE = 'WHALEHUNT_TEST_PAGE_CRASH_AT';

export type PageCrashPoint =
  'beforePageChunk' | 'afterPageChunk' | 'beforePageBarrier' | 'afterPageBarrier' | 'beforeHandoverCommit';
const PAGE_CRASH_POINTS: readonly PageCrashPoint[] = [
  'beforePageChunk',
  'afterPageChunk',
  'beforePageBarrier',
  'afterPageBarrier',
  'beforeHandoverCommit',
];

/** Parses WHALEHUNT_TEST_PAGE_CRASH_AT; throws ConfigError naming the variable when it is malformed. */
export function parsePageCrashAt(value: string | undefined): { point: PageCrashPoint; position: number } | null {
  if (value === undefined || value.trim() === '') return null;
  const match = /^(\w+):(\d+)$/.exec(value.trim());
  const point = match?.[1] as PageCrashPoint | undefined;
  const position = Number(match?.[2]);
  if (!point || !PAGE_CRASH_POINTS.includes(point) || !Number.isSafeInteger(position) || position < 1) {
    throw new ConfigError([
      { variable: PAGE_CRASH_AT_VARIABLE, problem: `must be <${PAGE_CRASH_POINTS.join('|')}>:<position>` },
    ]);
  }
  return { point, position };
}

/** Page run hooks that SIGKILL this process at the cut point: no handler, no flush, no goodbye. */
export function pageCrashHooks(crash: { point: PageCrashPoint; position: number }, log: JsonLogger): PageConsumerHooks {
  const maybeCrash = (point: PageCrashPoint, position: number): void => {
    if (point !== crash.point || position < crash.position) return;
    log.warn('test crash point reached: SIGKILL', { crashAt: point, position });
    process.kill(process.pid, 'SIGKILL');
  };
  return {
    beforeChunkCommit: ({ lastPosition }) => maybeCrash('beforePageChunk', lastPosition),
    afterChunkCommit: ({ appliedPosition }) => maybeCrash('afterPageChunk', appliedPosition),
    beforeCursorSwap: ({ appliedPosition }) => maybeCrash('beforePageBarrier', appliedPosition),
    afterCursorSwap: ({ appliedPosition }) => maybeCrash('afterPageBarrier', appliedPosition),
    insideHandover: ({ appliedPosition }) => maybeCrash('beforeHandoverCommit', appliedPosition),
  };
}
