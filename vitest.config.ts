import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

// Vitest runs projects of one `sequence.groupOrder` side by side on one pool, but every project with file
// parallelism off (e2e) in a group of its own, after all the others. So the suite's time is the first group's
// (unit, db, the outage file, the progress file, topology: two at a time) + the other e2e files' serial sum.
const e2e = {
  globalSetup: ['test/support/temporal-global-setup.ts'],
  setupFiles: ['test/support/quiet-temporal-runtime.ts'],
  testTimeout: 180_000,
  hookTimeout: 180_000,
};

// Six projects: pure logic (no services), real Postgres, the full stack (Temporal dev server, Postgres, the
// reference stream server), two files of the full stack that mostly wait (the database outages, the progress
// refresh), and the production topology (the Temporal server release on Postgres over mutual TLS, set up by the deploy
// scripts). `vitest run --project unit` runs the fast part alone.
export default defineConfig({
  test: {
    pool: 'forks',
    restoreMocks: true,
    // At least two at once, also on a 2-core machine (the default there is one): the outage file waits out more than
    // two minutes of downtime in one worker while unit and db files run in the other.
    maxWorkers: Math.max(2, availableParallelism() - 1),
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: ['test/unit/**/*.test.ts', 'test/sim/**/*.test.ts'], testTimeout: 30_000 },
      },
      {
        extends: true,
        test: { name: 'db', include: ['test/db/**/*.test.ts'], testTimeout: 60_000, hookTimeout: 60_000 },
      },
      {
        extends: true,
        test: {
          // Postgres stopped for 5, 30 and 90 s (its own Postgres; the e2e dev server): mostly idle, so it runs
          // alongside unit and db (named to sort, and so start, first among them) instead of adding to the e2e chain.
          name: 'database-outages',
          include: ['test/e2e/database-faults.test.ts'],
          ...e2e,
        },
      },
      {
        extends: true,
        test: {
          // Mostly waiting too (commits slowed on purpose, then a 20 s progress throttle): beside the outage file, on
          // the slot that unit and db leave free long before the outages end, not in the e2e chain.
          name: 'progress-refresh',
          include: ['test/e2e/consumer-progress.test.ts'],
          ...e2e,
        },
      },
      {
        extends: true,
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          exclude: ['test/e2e/database-faults.test.ts', 'test/e2e/consumer-progress.test.ts'],
          ...e2e,
          // The Temporal dev server and worker processes are heavy on a 2-core machine.
          fileParallelism: false,
        },
      },
      {
        extends: true,
        test: {
          // One file, with its own Temporal server, Postgres and workers: it runs in the first group, beside unit
          // and db and the outage file's idle minutes, instead of after the e2e chain.
          name: 'topology',
          include: ['test/topology/**/*.test.ts'],
          // A first run builds the server (scripts/ensure-temporal-server.sh) inside beforeAll.
          testTimeout: 600_000,
          hookTimeout: 900_000,
        },
      },
    ],
  },
});
