// The whale alert dispatcher of one tree, in a process of its own for the alerts bench (bench/alerts.ts): the
// OutboxDispatcher of the tree at BENCH_TARGET_ROOT, on a pool of that tree's createPool (the worker's default
// size) over BENCH_DB_URL, which it first migrates with that tree's migrate. It POSTs to BENCH_WEBHOOK_URL and
// is driven by lines on stdin: `start` (a new dispatcher, started as the worker starts one), `stop` (waits for
// its stop), `exit`. It answers each with a line on stdout (ready, started, stopped) and prints one JSON line
// last. Its CPU is read from /proc by the parent, never here. BENCH_ALERTS_CONCURRENCY sets `concurrency`
// (a tree before it ignores it; for investigations, not results); signingSecrets are passed to every tree (one
// before signing ignores them).
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import type { Logger } from '@temporalio/common';
import type * as Db from '../db/index.js';

/** A Standard Webhooks secret: `whsec_` + base64 of 32 bytes. */
const BENCH_SIGNING_SECRET = `whsec_${Buffer.alloc(32, 1).toString('base64')}`;

export interface AlertsRunResult {
  /** warnings and errors the dispatcher logged (each also printed to stderr) */
  warnings: number;
  errors: number;
  maxRssMb: number;
}

interface Dispatcher {
  start(): void;
  stop(): Promise<void>;
}
type DispatcherClass = new (options: Record<string, unknown>) => Dispatcher;

const root = process.env.BENCH_TARGET_ROOT!;
const from = async <T>(relative: string) => (await import(pathToFileURL(join(root, relative)).href)) as T;
const db = await from<typeof Db>('db/index.ts');
const { OutboxDispatcher } = await from<{ OutboxDispatcher: DispatcherClass }>('activities/outbox.ts');

let warnings = 0;
let errors = 0;
const quiet = (): void => undefined;
// Info and debug lines are dropped in both trees (the tree before logs one info line per alert sent): the bench
// measures the dispatcher, not a log sink. Warnings and errors are counted and shown.
const log: Logger = {
  log: quiet,
  trace: quiet,
  debug: quiet,
  info: quiet,
  warn: (message, meta) => {
    warnings += 1;
    console.error(`[${process.env.BENCH_LABEL}] warn ${message}`, meta ?? '');
  },
  error: (message, meta) => {
    errors += 1;
    console.error(`[${process.env.BENCH_LABEL}] error ${message}`, meta ?? '');
  },
};

const concurrency = process.env.BENCH_ALERTS_CONCURRENCY ? Number(process.env.BENCH_ALERTS_CONCURRENCY) : null;

const pool = db.createPool(process.env.BENCH_DB_URL!);
await db.migrate(pool);
process.stdout.write('ready\n');

let dispatcher: Dispatcher | null = null;
for await (const line of createInterface({ input: process.stdin })) {
  const command = line.trim();
  if (command === 'start') {
    dispatcher = new OutboxDispatcher({
      pool,
      webhookUrl: process.env.BENCH_WEBHOOK_URL!,
      signingSecrets: [BENCH_SIGNING_SECRET],
      log,
      ...(concurrency === null ? {} : { concurrency }),
    });
    dispatcher.start();
    process.stdout.write('started\n');
  } else if (command === 'stop') {
    await dispatcher?.stop();
    dispatcher = null;
    process.stdout.write('stopped\n');
  } else if (command === 'exit') {
    break;
  }
}
await dispatcher?.stop();
await pool.end();
const result: AlertsRunResult = { warnings, errors, maxRssMb: process.resourceUsage().maxRSS / 1024 };
process.stdout.write(`${JSON.stringify(result)}\n`);
