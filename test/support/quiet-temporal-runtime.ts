// A vitest setup file of the e2e project: before any test module runs, the process's Temporal Runtime gets a
// WARN logger. At INFO every worker (and every replay) logs its state changes, hundreds of lines that bury
// the test results; warnings and errors still show.
import { DefaultLogger, Runtime } from '@temporalio/worker';

Runtime.install({ logger: new DefaultLogger('WARN') });
