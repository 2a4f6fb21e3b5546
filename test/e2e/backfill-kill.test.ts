// kill -9 of a real worker process (dist/worker/main.js, crashed by its test-only WHALEHUNT_TEST_PAGE_CRASH_AT) at
// each cut point of a backfill page (docs/protocol.md §8): before and after an event's chunk commit, before
// and after a durable quarantine receipt, before and after the page barrier (the cursor swap). Temporal retries
// the run on a fresh worker process; the backfill completes and the database equals the reference fold, every
// event with exactly one receipt. Then a kill -9 after the backfill reached its target, inside the handover before
// it commits, with live appends running: it hands over once and the live consumer follows. Then the overlapping
// page of the section 7 oracle exactly as the reference server serves it, and two attempts racing for the same page.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { consumePages, type PageOutcome, type PageStore } from '../../activities/page-consumer.js';
import { pageConsumerConfig, poolPageStore } from '../../activities/index.js';
import { loadPageProgress } from '../../db/pages.js';
import { Journal } from '../../simulator/journal.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import { loadConfig } from '../../worker/config.js';
import type { backfillWorkflow } from '../../workflows/index.js';
import {
  backfillWorkflowId,
  consumerIdSearchAttribute,
  consumerWorkflowId,
  kindSearchAttribute,
  phaseSearchAttribute,
  type BackfillWorkflowInput,
} from '../../workflows/definitions.js';
import { loadCommitted } from '../../db/index.js';
import { distinctEventIds, handoverRecord } from './backfill-support.js';
import { foldExecutions, savedEffects } from '../db/consume-stream-support.js';
import { dumpState } from '../db/state-dump.js';
import { useTestDatabase } from '../support/db.js';
import { stopChildProcess, useResources } from '../support/leaks.js';
import { createTestClient, sharedWorkflowBundlePath, uniqueTaskQueue, waitFor } from '../support/temporal.js';
import { correction, testWorkerEnv } from './consumer-harness.js';
import { isJsonObject, spawnWorker } from '../support/worker-process.js';

const API_KEY = `wh-page-kill-secret-${randomUUID()}`;
const db = useTestDatabase();
const silent = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** Generated history with a correction of an entity never seen at position 31 (a quarantine), then more. */
function journalWithQuarantine(): { journal: Journal; quarantineAt: number } {
  const journal = Journal.generate({ seed: 77, transitions: 30 });
  const quarantineAt = journal.append({ events: [correction('ghost', 'm-ghost', 2, '0.5', '3')] }).position;
  for (let i = 0; i < 15; i++) journal.appendGenerated();
  return { journal, quarantineAt };
}

describe('kill -9 of the worker at each cut point of a backfill page', () => {
  const res = useResources();

  async function startStack(journal: Journal, extraEnv: Record<string, string>) {
    const server = res.track(
      await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY] }),
      (s) => s.close(),
      'reference stream',
    );
    const testClient = res.track(await createTestClient());
    const taskQueue = uniqueTaskQueue('page-kill');
    const env = {
      ...testWorkerEnv({ databaseUrl: db.url, taskQueue, streamUrl: server.url, apiKey: API_KEY }),
      WORKFLOW_BUNDLE_PATH: sharedWorkflowBundlePath(),
      LOG_LEVEL: 'INFO',
      PAGE_STREAM: server.stream,
      RECONNECT_MAX_ATTEMPTS: '2',
      ...extraEnv,
    };
    return { server, testClient, taskQueue, env };
  }

  /** Starts the backfill, lets the doomed worker crash at `crashAt`, and returns once it died by SIGKILL. */
  async function crashOnce(
    stack: Awaited<ReturnType<typeof startStack>>,
    consumerId: string,
    crashAt: string,
    input: Partial<BackfillWorkflowInput> = {},
  ) {
    const doomed = spawnWorker({ ...stack.env, WHALEHUNT_TEST_PAGE_CRASH_AT: crashAt });
    res.track(doomed.child, (c) => stopChildProcess(c), 'worker process (crashing)');
    const handle = await stack.testClient.client.workflow.start<typeof backfillWorkflow>('backfillWorkflow', {
      taskQueue: stack.taskQueue,
      workflowId: backfillWorkflowId(consumerId),
      args: [
        {
          consumerId,
          filter: {},
          pagesPerRun: 3,
          // The killed attempt is noticed by its missing heartbeat; keep that short.
          tuning: { heartbeatTimeoutMs: 2_000, maxActivityAttempts: 20, maxActivityRetryIntervalMs: 1_000 },
          ...input,
        },
      ],
      typedSearchAttributes: [
        { key: consumerIdSearchAttribute, value: consumerId },
        { key: phaseSearchAttribute, value: 'backfilling' },
        { key: kindSearchAttribute, value: 'backfill' },
      ],
    });
    const crash = await waitFor(
      () => Promise.race([doomed.exited, new Promise<false>((r) => setTimeout(() => r(false), 200))]),
      { description: `the worker to crash at ${crashAt}`, timeoutMs: 60_000 },
    ).catch((error: Error) => {
      throw new Error(`${error.message}\nworker stdout:\n${doomed.lines.slice(-15).join('\n')}`);
    });
    await res.close(doomed.child);
    expect(crash, `worker stderr: ${doomed.stderr.join('\n')}`).toEqual({ code: null, signal: 'SIGKILL' });
    return { handle, doomed };
  }

  /** A fresh worker process takes the retried run over; the backfill completes. */
  async function survive(stack: Awaited<ReturnType<typeof startStack>>, handle: { result(): Promise<unknown> }) {
    const survivor = spawnWorker(stack.env);
    res.track(survivor.child, (c) => stopChildProcess(c), 'worker process');
    const result = (await handle.result()) as Awaited<ReturnType<typeof backfillWorkflow>>;
    survivor.child.kill('SIGTERM');
    expect(await survivor.exited).toEqual({ code: 0, signal: null });
    await res.close(survivor.child);
    return { result, survivor };
  }

  const { quarantineAt } = journalWithQuarantine();
  const CUTS = [
    { name: 'before an event commit', crashAt: 'beforePageChunk:12', durable: (p: number) => p < 12 },
    { name: 'after an event commit', crashAt: 'afterPageChunk:12', durable: (p: number) => p >= 12 },
    {
      name: 'before a durable quarantine receipt',
      crashAt: `beforePageChunk:${quarantineAt}`,
      durable: (p: number) => p < quarantineAt,
    },
    {
      name: 'after a durable quarantine receipt',
      crashAt: `afterPageChunk:${quarantineAt}`,
      durable: (p: number) => p >= quarantineAt,
    },
    { name: 'before the page barrier', crashAt: 'beforePageBarrier:20', durable: (p: number) => p >= 20 },
    { name: 'after the page barrier', crashAt: 'afterPageBarrier:20', durable: (p: number) => p >= 20 },
  ];

  it.each(CUTS)('$name ($crashAt): the retried run completes with the reference fold', async ({ crashAt, durable }) => {
    const { journal } = journalWithQuarantine();
    // The quarantine reason is terminal by policy: its record is a durable outcome committed with its chunk.
    const stack = await startStack(journal, {
      PAGE_LIMIT: '6',
      PAGE_CHUNK_SIZE: '2',
      QUARANTINE_TERMINAL_REASONS: 'unknown_correction_target',
    });
    const consumerId = `page-kill-${crashAt.replace(':', '-')}`;
    const { handle, doomed } = await crashOnce(stack, consumerId, crashAt);

    const atCrash = (await loadPageProgress(db.pool, consumerId))!;
    expect(durable(atCrash.appliedPosition), `applied ${atCrash.appliedPosition} at ${crashAt}`).toBe(true);
    const quarantinedAtCrash = (await dumpState(db.pool, consumerId)).quarantine;
    if (crashAt === `beforePageChunk:${quarantineAt}`) expect(quarantinedAtCrash).toEqual([]);
    if (crashAt === `afterPageChunk:${quarantineAt}`)
      expect(quarantinedAtCrash.map((q) => q.disposition)).toEqual(['terminal']);

    const { result, survivor } = await survive(stack, handle);
    expect(result.phase).toBe('completed');
    expect(await loadPageProgress(db.pool, consumerId)).toMatchObject({ appliedPosition: journal.history.head });
    const saved = await savedEffects(db.pool, consumerId);
    expect(saved.executions).toEqual(foldExecutions(journal));
    expect(saved.receiptIds).toHaveLength(distinctEventIds(journal));
    expect(saved.receiptIds).toHaveLength(new Set(saved.receiptIds).size);
    expect(saved.state.quarantine.map((q) => [q.disposition, q.reason])).toEqual([
      ['terminal', 'unknown_correction_target'],
    ]);

    await res.close(stack.testClient);
    await res.close(stack.server);
    const lines = [...doomed.lines, ...survivor.lines];
    expect(lines.filter((line) => !isJsonObject(line))).toEqual([]);
    expect([...lines, ...doomed.stderr, ...survivor.stderr].filter((l) => l.includes(API_KEY))).toEqual([]);
  });

  it('kill -9 after the target is reached, inside the handover before it commits: it hands over once, the stream follows live', async () => {
    const journal = Journal.generate({ seed: 80, transitions: 40 });
    const stack = await startStack(journal, { PAGE_LIMIT: '10', PAGE_CHUNK_SIZE: '4' });
    const consumerId = 'page-kill-handover';
    journal.startLiveAppends(10);
    try {
      const headAtStart = journal.head;
      const { handle, doomed } = await crashOnce(stack, consumerId, 'beforeHandoverCommit:1', {
        thenStream: { subscriptionId: consumerId },
      });
      expect(doomed.lines.some((l) => l.includes('"crashAt":"beforeHandoverCommit"'))).toBe(true);
      // The handover's transaction died with the worker: still a page consumer, at or past its target.
      const atCrash = (await loadPageProgress(db.pool, consumerId))!;
      expect(atCrash.appliedPosition).toBeGreaterThanOrEqual(headAtStart);
      expect(await loadCommitted(db.pool, consumerId)).toBeNull();

      // A fresh worker takes the retried handover over (noticed by its heartbeat timeout), then runs the stream.
      const survivor = spawnWorker(stack.env);
      res.track(survivor.child, (c) => stopChildProcess(c), 'worker process');
      const result = await handle.result();
      expect(result.phase).toBe('completed');
      expect(result.target).toMatchObject({ source: 'head', historyId: journal.historyId });
      expect(result.target!.position).toBeGreaterThanOrEqual(headAtStart);
      expect(result.handover).toMatchObject({
        workflowId: consumerWorkflowId(consumerId),
        appliedPosition: atCrash.appliedPosition,
      });
      // Once: one handover activity, its second attempt committed it, one live consumer started.
      const record = await handoverRecord(handle);
      expect(record).toEqual({
        scheduled: 1,
        completedAttempts: [2],
        results: [{ kind: 'handed_over', appliedPosition: atCrash.appliedPosition }],
        childStarts: [consumerWorkflowId(consumerId)],
      });
      expect(await loadPageProgress(db.pool, consumerId)).toBeNull();

      const later = journal.head + 10;
      await waitFor(async () => ((await loadCommitted(db.pool, consumerId))?.position ?? 0) >= later, {
        description: `the live consumer to follow the live appends past ${later}`,
        timeoutMs: 60_000,
      });
      journal.stopLiveAppends();
      await waitFor(async () => (await loadCommitted(db.pool, consumerId))?.position === journal.head, {
        description: `the live consumer to commit the head ${journal.head}`,
        timeoutMs: 60_000,
      });
      const saved = await savedEffects(db.pool, consumerId);
      expect(saved.executions).toEqual(foldExecutions(journal));
      expect(saved.receiptIds).toHaveLength(distinctEventIds(journal));
      expect(saved.receiptIds).toHaveLength(new Set(saved.receiptIds).size);

      const consumer = stack.testClient.client.workflow.getHandle(consumerWorkflowId(consumerId));
      await consumer.terminate('test finished');
      survivor.child.kill('SIGTERM');
      expect(await survivor.exited).toEqual({ code: 0, signal: null });
      await res.close(survivor.child);
      const lines = [...doomed.lines, ...survivor.lines];
      expect([...lines, ...doomed.stderr, ...survivor.stderr].filter((l) => l.includes(API_KEY))).toEqual([]);
    } finally {
      journal.stopLiveAppends();
    }
    await res.close(stack.testClient);
    await res.close(stack.server);
  });

  it('the overlapping page (saved C7, applied 105; page 104, 106, 107 → C8; crash after 106) resumes from C7', async () => {
    const journal = Journal.generate({ seed: 78, transitions: 112, maxEventsPerTransition: 1 });
    const stack = await startStack(journal, { PAGE_LIMIT: '3', PAGE_CHUNK_SIZE: '1' });
    const consumerId = 'page-kill-overlap';
    // Saved C7 after applying 1..105 in one page.
    const config = pageConsumerConfig(loadConfig({ ...stack.env, PAGE_LIMIT: '105' }));
    const first = await consumePages(
      { store: poolPageStore(db.pool), config, log: silent },
      { consumerId, filter: {}, maxPages: 1 },
      { heartbeat: () => undefined, signal: new AbortController().signal },
    );
    expect(first.progress.appliedPosition).toBe(105);
    const c7 = first.progress.resumeCursor;

    stack.server.faults.pageOverlap = { transitions: 1, omitCursorPosition: true };
    const { handle, doomed } = await crashOnce(stack, consumerId, 'afterPageChunk:106');
    // 106 is durable, 107 is not, and the cursor is still C7.
    expect(await loadPageProgress(db.pool, consumerId)).toMatchObject({ appliedPosition: 106, resumeCursor: c7 });

    // The source serves the same overlapping page again: 104 and 106 are recognised, 107 applied once, then C8.
    stack.server.faults.pageOverlap = { transitions: 1, omitCursorPosition: true };
    const { result } = await survive(stack, handle);
    expect(result.phase).toBe('completed');
    expect(result.counters.recognised).toBe(2);
    const saved = await savedEffects(db.pool, consumerId);
    expect(saved.executions).toEqual(foldExecutions(journal));
    expect(saved.receiptIds).toHaveLength(distinctEventIds(journal));
    expect(doomed.lines.some((l) => l.includes('"crashAt":"afterPageChunk"'))).toBe(true);
    await res.close(stack.testClient);
    await res.close(stack.server);
  });

  it('two attempts racing for the same page: one loses the compare-and-swap and stops without writing', async () => {
    const journal = Journal.generate({ seed: 79, transitions: 12 });
    const server = res.track(
      await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY] }),
      (s) => s.close(),
      'reference stream',
    );
    const config = {
      ...pageConsumerConfig(
        loadConfig({ DATABASE_URL: db.url, WHALEHUNT_URL: server.url, WHALEHUNT_API_KEY: API_KEY, PAGE_LIMIT: '5' }),
        server.stream,
      ),
      chunkSize: 100,
    };
    const consumerId = 'page-race';
    const real = poolPageStore(db.pool);
    await real.openPageProgress({ consumerId, stream: server.stream, filter: {} });
    // Both attempts hold the same version and the same page when they reach the commit.
    let arrived = 0;
    let release!: () => void;
    const bothArrived = new Promise<void>((r) => (release = r));
    const racing: PageStore = {
      ...real,
      async commitPageChunk(chunk) {
        arrived += 1;
        if (arrived === 2) release();
        await bothArrived;
        return real.commitPageChunk(chunk);
      },
    };
    const attempt = (): Promise<PageOutcome> =>
      consumePages(
        { store: racing, config, log: silent },
        { consumerId, filter: {}, maxPages: 1 },
        { heartbeat: () => undefined, signal: new AbortController().signal },
      );
    const outcomes = await Promise.all([attempt(), attempt()]);
    expect(outcomes.map((o) => o.kind).sort()).toEqual(['fenced', 'page_limit']);
    const winner = outcomes.find((o) => o.kind === 'page_limit')!;
    const loser = outcomes.find((o) => o.kind === 'fenced')!;
    expect(loser.counters.chunks).toBe(0);
    const saved = await loadPageProgress(db.pool, consumerId);
    expect(saved).toMatchObject({
      appliedPosition: winner.progress.appliedPosition,
      version: winner.progress.version,
      resumeCursor: winner.progress.resumeCursor,
    });
    // Exactly the winner's page: one receipt per event of it, nothing twice.
    const receipts = (await dumpState(db.pool, consumerId)).receipts;
    expect(receipts.length).toBe(winner.counters.applied + winner.counters.noEffect + winner.counters.duplicates);
    expect(new Set(receipts.map((r) => r.eventId)).size).toBe(receipts.length);
    await res.close(server);
  });
});
