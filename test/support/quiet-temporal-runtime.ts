// A vitest setup file of the e2e project: before any test module runs, the process's Temporal Runtime gets a
// WARN logger. At INFO every worker (and every replay) logs its state changes, hundreds of lines that bury
// the test results; warnings and errors still show.
//
// One exception: the worker's "Activity failed" and "Workflow failed" warnings for the project's typed failures
// (a lost lease, a stream or database fault, a refused rebind, ...), which the tests cause on purpose,
// dozens of stack traces a run. Those are kept in the test's buffer and printed only when the test fails. Any
// other failure (a TypeError, a plain Error: a bug) still prints at once.
import { DefaultLogger, Runtime, type LogEntry, type LogMetadata } from '@temporalio/worker';
import { beforeEach } from 'vitest';

/** The failure types activities/index.ts raises deliberately (toFailure), and the typed errors behind them. */
const DELIBERATE_FAILURES = new Set([
  'ConfigError',
  'DatabaseBehind',
  'GenerationNotReached',
  'InvalidDecision',
  'LeaseLost',
  'PageSourceUnavailable',
  'StorageFailure',
  'StreamTransportError',
]);

/**
 * An activity that failed with one of our typed failures; or a workflow that failed: a bug in workflow code fails
 * its workflow task instead ("Workflow task failed", printed), so a failed workflow here is a refusal a test
 * provoked. (Its error crossed from the workflow thread as a clone, which keeps the name but not the type.)
 */
function isDeliberate(message: string, meta: LogMetadata | undefined): boolean {
  if (message === 'Workflow failed') return true;
  if (message !== 'Activity failed') return false;
  const error = meta?.error as { name?: unknown; type?: unknown } | undefined;
  return [error?.type, error?.name].some((name) => typeof name === 'string' && DELIBERATE_FAILURES.has(name));
}

/** The SDK's own console output (DefaultLogger's default function), for what is printed. */
class Printer extends DefaultLogger {
  print(entry: LogEntry): void {
    this.logFunction(entry);
  }
}
const printer = new Printer('WARN');
let held: LogEntry[] = [];

Runtime.install({
  logger: new DefaultLogger('WARN', (entry) => {
    if (isDeliberate(entry.message, entry.meta)) held.push(entry);
    else printer.print(entry);
  }),
});

beforeEach(({ onTestFailed }) => {
  held = [];
  onTestFailed(() => {
    for (const entry of held) printer.print(entry);
  });
});
