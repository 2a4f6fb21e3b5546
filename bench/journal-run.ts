// One measurement of the journal bench, in a process of its own: the reference server's Journal of the tree at
// BENCH_TARGET_ROOT generates BENCH_JOURNAL_TRANSITIONS transitions, is read through once (as a from_floor
// replay reads it), then takes BENCH_JOURNAL_LIVE live appends while a reader follows the head. Reports the
// live heap after a forced full GC at each step and the process's peak RSS. Prints one JSON line.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Journal as JournalClass } from '../simulator/journal.js';

export interface JournalRunResult {
  transitions: number;
  live: number;
  generateMs: number;
  readMs: number;
  heapAfterGenerateMb: number;
  heapAfterReadMb: number;
  heapAfterLiveMb: number;
  maxRssMb: number;
}

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const liveHeapMb = () => {
  gc();
  return process.memoryUsage().heapUsed / 2 ** 20;
};

const root = process.env.BENCH_TARGET_ROOT!;
const transitions = Number(process.env.BENCH_JOURNAL_TRANSITIONS);
const live = Number(process.env.BENCH_JOURNAL_LIVE);
const { Journal } = (await import(pathToFileURL(join(root, 'simulator/journal.ts')).href)) as {
  Journal: typeof JournalClass;
};

let t = performance.now();
const journal = Journal.generate({ seed: 7, transitions });
const generateMs = performance.now() - t;
const heapAfterGenerateMb = liveHeapMb();

t = performance.now();
let events = 0;
for (const transition of journal.range(0, journal.head)) events += transition.events.length;
const readMs = performance.now() - t;
const heapAfterReadMb = liveHeapMb();

// Live appends with a reader at the head, as a live session reads them.
let position = journal.head;
for (let i = 0; i < live; i++) {
  journal.appendGenerated();
  for (const transition of journal.range(position, journal.head)) events += transition.events.length;
  position = journal.head;
}
const heapAfterLiveMb = liveHeapMb();

const result: JournalRunResult = {
  transitions,
  live,
  generateMs,
  readMs,
  heapAfterGenerateMb,
  heapAfterReadMb,
  heapAfterLiveMb,
  maxRssMb: process.resourceUsage().maxRSS / 1024,
};
// The journal is used after the last measurement, so that no GC above could collect it early.
process.stdout.write(`${JSON.stringify({ ...result, events, head: journal.head })}\n`);
