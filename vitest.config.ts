import { defineConfig } from 'vitest/config';

// Four projects: pure logic (no services), real Postgres, the full stack (Temporal dev server, Postgres, the
// reference stream server), and the production topology (the Temporal server release on Postgres over mutual TLS,
// set up by the deploy scripts). `vitest run --project unit` runs the fast part alone.
export default defineConfig({
  test: {
    pool: 'forks',
    restoreMocks: true,
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
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          globalSetup: ['test/support/temporal-global-setup.ts'],
          setupFiles: ['test/support/quiet-temporal-runtime.ts'],
          testTimeout: 180_000,
          hookTimeout: 180_000,
          // The Temporal dev server and worker processes are heavy on a 2-core machine.
          fileParallelism: false,
        },
      },
      {
        extends: true,
        test: {
          name: 'topology',
          include: ['test/topology/**/*.test.ts'],
          // A first run builds the server (scripts/ensure-temporal-server.sh) inside beforeAll.
          testTimeout: 600_000,
          hookTimeout: 900_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
