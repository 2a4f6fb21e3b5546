// The consumePages activity as the worker registers it (createActivities), executed by a real Temporal worker
// against real Postgres and the reference server's paginated endpoint: progress and effects are saved, a
// source that stays unavailable is retried by Temporal, cancellation reaches a run waiting in its backoff,
// and the API key is in no history, failure or log line.
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { WorkflowFailedError } from '@temporalio/client';
import { ActivityFailure, ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { createActivities, pageSourceUrl } from '../../activities/index.js';
import { loadPageProgress } from '../../db/pages.js';
import { Journal } from '../../simulator/journal.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import { loadConfig } from '../../worker/config.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import { createTestClient, waitFor, withWorker } from '../support/temporal.js';
import { stopPagesSignal, type pagesWorkflow } from './fixtures/page-workflows.js';

const here = dirname(fileURLToPath(import.meta.url));
const db = useTestDatabase();
const API_KEY = `wh-pages-secret-${randomUUID()}`;

describe('consumePages activity on a Temporal worker', () => {
  const res = useResources();

  async function setup(journal: Journal, env: Record<string, string>) {
    const server = res.track(
      await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY] }),
      (s) => s.close(),
      'reference stream server',
    );
    const testClient = res.track(await createTestClient());
    const logLines: string[] = [];
    const line = (msg: string, fields?: Record<string, unknown>) =>
      void logLines.push(`${msg} ${JSON.stringify(fields ?? {})}`);
    const config = loadConfig({
      DATABASE_URL: db.url,
      WHALEHUNT_URL: server.url,
      WHALEHUNT_API_KEY: API_KEY,
      HEARTBEAT_MS: '100',
      RECONNECT_MAX_ATTEMPTS: '1',
      RECONNECT_INITIAL_MS: '10',
      RECONNECT_MAX_MS: '10',
      ...env,
    });
    const activities = createActivities({ pool: db.pool, config, log: { info: line, warn: line, error: line } });
    return { server, client: testClient.client, testClient, activities, logLines };
  }

  function run(
    client: Awaited<ReturnType<typeof setup>>['client'],
    taskQueue: string,
    consumerId: string,
    stream = 'polymarket',
  ) {
    return client.workflow.start<typeof pagesWorkflow>('pagesWorkflow', {
      taskQueue,
      workflowId: `pages-${consumerId}-${randomUUID()}`,
      args: [{ consumerId, filter: {}, stream }],
    });
  }

  it('derives the page source from the stream URL', () => {
    expect(pageSourceUrl('ws://127.0.0.1:8787/v1/stream')).toBe('http://127.0.0.1:8787');
    expect(pageSourceUrl('wss://stream.example.com/v1/stream')).toBe('https://stream.example.com');
  });

  it('backfills the journal to its head and saves the cursor; no history or log line holds the key', async () => {
    const journal = Journal.generate({ seed: 11, transitions: 30 });
    const { server, client, testClient, activities, logLines } = await setup(journal, {});
    await withWorker({ workflowsPath: join(here, 'fixtures/page-workflows.ts'), activities }, async ({ taskQueue }) => {
      const handle = await run(client, taskQueue, 'pages-activity-1');
      const result = await handle.result();
      expect(result).toMatchObject({
        outcome: { kind: 'caught_up', progress: { appliedPosition: journal.history.head } },
      });
      const saved = await loadPageProgress(db.pool, 'pages-activity-1');
      expect(saved).toMatchObject({ appliedPosition: journal.history.head, historyId: journal.historyId });
      expect('outcome' in result && result.outcome.progress.resumeCursor).toBe(saved!.resumeCursor);
      expect(JSON.stringify(await handle.fetchHistory())).not.toContain(API_KEY);
    });
    expect(logLines.join('\n')).not.toContain(API_KEY);
    await res.close(testClient);
    await res.close(server);
  });

  it('a source that stays unavailable fails retryable and Temporal retries it; the failure does not hold the key', async () => {
    const journal = Journal.generate({ seed: 11, transitions: 5 });
    const { server, client, testClient, activities, logLines } = await setup(journal, {});
    await res.close(server);
    let attempts = 0;
    const counted = {
      consumePages: (input: Parameters<typeof activities.consumePages>[0]) => (
        (attempts += 1),
        activities.consumePages(input)
      ),
    };
    await withWorker(
      { workflowsPath: join(here, 'fixtures/page-workflows.ts'), activities: counted },
      async ({ taskQueue }) => {
        const handle = await run(client, taskQueue, 'pages-activity-down');
        const failure = await handle.result().then(
          () => null,
          (error: unknown) => error,
        );
        expect(failure).toBeInstanceOf(WorkflowFailedError);
        const activityFailure = (failure as WorkflowFailedError).cause;
        expect(activityFailure).toBeInstanceOf(ActivityFailure);
        const cause = (activityFailure as ActivityFailure).cause;
        expect(cause).toBeInstanceOf(ApplicationFailure);
        expect(cause).toMatchObject({ type: 'PageSourceUnavailable', nonRetryable: false });
        expect((cause as ApplicationFailure).message).toMatch(/page source unavailable/);
        // Retryable: the workflow's policy (2 attempts) ran it again before giving up.
        expect(attempts).toBe(2);
        expect(JSON.stringify(await handle.fetchHistory())).not.toContain(API_KEY);
      },
    );
    expect(logLines.join('\n')).not.toContain(API_KEY);
    expect(await loadPageProgress(db.pool, 'pages-activity-down')).toMatchObject({
      resumeCursor: null,
      appliedPosition: 0,
    });
    await res.close(testClient);
  });

  it('cancellation reaches a run waiting in its backoff: it stops with the progress saved so far', async () => {
    const journal = Journal.generate({ seed: 11, transitions: 10 });
    // At the head the source repeats the cursor: the run backs off for a long time, heartbeating meanwhile.
    const { server, client, testClient, activities } = await setup(journal, {
      RECONNECT_MAX_ATTEMPTS: '3',
      RECONNECT_INITIAL_MS: '600000',
      RECONNECT_MAX_MS: '600000',
    });
    await withWorker({ workflowsPath: join(here, 'fixtures/page-workflows.ts'), activities }, async ({ taskQueue }) => {
      const handle = await run(client, taskQueue, 'pages-activity-cancel');
      await waitFor(
        async () => {
          const described = await handle.describe();
          return (
            (await loadPageProgress(db.pool, 'pages-activity-cancel'))?.appliedPosition === journal.history.head &&
            described.raw.pendingActivities?.[0]?.heartbeatDetails
          );
        },
        { description: 'the run at the head, backing off and heartbeating', timeoutMs: 30_000 },
      );
      const before = await loadPageProgress(db.pool, 'pages-activity-cancel');
      await handle.signal(stopPagesSignal);
      const result = await handle.result();
      expect(result).toMatchObject({
        outcome: { kind: 'cancelled', progress: { appliedPosition: journal.history.head } },
      });
      expect(await loadPageProgress(db.pool, 'pages-activity-cancel')).toEqual(before);
    });
    await res.close(testClient);
    await res.close(server);
  });
});
