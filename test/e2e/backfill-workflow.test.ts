// backfillWorkflow on the real stack (Temporal dev server, a worker with the real activities, Postgres, the
// reference server's page endpoint): the CLI `backfill` follows it to `completed` at the head and the database
// equals the reference fold; `status` and `list` show a backfill; a held quarantine and a refused cursor wait for
// decisions taken through the CLI's updates (validated synchronously); pause and resume; a non-advancing source is
// backed off, never spun; zero-item pages advance; against a live source, --then-stream completes at the target fixed
// when it started, hands over once and the live consumer follows, every event applied exactly once; --tail waits at
// the head instead of spinning; --until stops at its position. Every history replays and holds no API key.
import { describe, expect, it } from 'vitest';
import { loadCommitted } from '../../db/index.js';
import { loadPageProgress } from '../../db/pages.js';
import { formatCount } from '../../protocol/progress.js';
import { Journal } from '../../simulator/journal.js';
import type { backfillWorkflow, consumerWorkflow } from '../../workflows/index.js';
import {
  backfillStatusQuery,
  backfillWorkflowId,
  consumerIdSearchAttribute,
  consumerWorkflowId,
  kindSearchAttribute,
  pauseSignal,
  phaseSearchAttribute,
  resumeSignal,
  statusQuery,
  type BackfillStatus,
  type BackfillWorkflowInput,
} from '../../workflows/definitions.js';
import { foldExecutions, savedEffects } from '../db/consume-stream-support.js';
import { dumpState } from '../db/state-dump.js';
import { runCli } from '../support/cli.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import { temporalTarget, waitFor, waitForQuery } from '../support/temporal.js';
import { API_KEY, correction, journalOf, trade, withConsumerStack, type ConsumerStack } from './consumer-harness.js';
import { distinctEventIds, eventsThrough, handoverRecord } from './backfill-support.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();

/** Short page runs, short backoffs: the workflow's steps take seconds. */
const PAGE_ENV = { PAGE_LIMIT: '8', PAGE_CHUNK_SIZE: '3', RECONNECT_MAX_ATTEMPTS: '2' };

function cli(stack: ConsumerStack) {
  const env = {
    TEMPORAL_ADDRESS: temporalTarget().address,
    TEMPORAL_NAMESPACE: temporalTarget().namespace,
    TASK_QUEUE: stack.taskQueue,
    DATABASE_URL: db.url,
  };
  return (...args: string[]) => runCli(env, ...args);
}

async function startBackfill(stack: ConsumerStack, input: Partial<BackfillWorkflowInput> & { consumerId: string }) {
  const handle = await stack.client.workflow.start<typeof backfillWorkflow>('backfillWorkflow', {
    taskQueue: stack.taskQueue,
    workflowId: backfillWorkflowId(input.consumerId),
    args: [
      {
        filter: {},
        pagesPerRun: 2,
        ...input,
        tuning: {
          heartbeatTimeoutMs: 5_000,
          maxActivityAttempts: 3,
          maxActivityRetryIntervalMs: 1_000,
          backoffInitialMs: 300,
          backoffMaxMs: 600,
          ...input.tuning,
        },
      },
    ],
    typedSearchAttributes: [
      { key: consumerIdSearchAttribute, value: input.consumerId },
      { key: phaseSearchAttribute, value: 'backfilling' },
      { key: kindSearchAttribute, value: 'backfill' },
    ],
  });
  stack.track(handle);
  return handle;
}

function waitForBackfill(
  handle: Awaited<ReturnType<typeof startBackfill>>,
  description: string,
  predicate: (status: BackfillStatus) => boolean,
) {
  return waitForQuery(handle, backfillStatusQuery, predicate, { description, timeoutMs: 60_000 });
}

async function expectFold(journal: Journal, consumerId: string) {
  const saved = await savedEffects(db.pool, consumerId);
  expect(saved.executions).toEqual(foldExecutions(journal));
  expect(saved.receiptIds).toHaveLength(new Set(saved.receiptIds).size);
  return saved;
}

describe('backfillWorkflow', () => {
  const res = useResources();

  it('the CLI follows it to completed at its target (the head); status and list show a backfill; a second run changes nothing', async () => {
    const journal = Journal.generate({ seed: 61, transitions: 40 });
    await withConsumerStack(res, db, { journal, env: PAGE_ENV }, async (stack) => {
      const run = cli(stack);
      const consumerId = 'bf-cli';
      const first = await run('backfill', '--consumer', consumerId, '--filter', '{}');
      stack.track(stack.client.workflow.getHandle(backfillWorkflowId(consumerId)));
      expect(first, first.stderr).toMatchObject({ code: 0 });
      expect(first.stdout).toContain(`workflow ${backfillWorkflowId(consumerId)}`);
      const head = journal.history.head;
      expect(first.stdout).toContain("target: the source's head at the first page");
      expect(first.stdout).toMatch(/^ {2}backfilling {2}/m);
      expect(first.stdout).toMatch(new RegExp(`^ {2}completed {2}applied ${head} of ${head} `, 'm'));
      expect(first.stdout).toContain(
        `completed: reached its target ${head} (the source's head when it started), applied position ${head}`,
      );
      expect(await loadPageProgress(db.pool, consumerId)).toMatchObject({ appliedPosition: journal.history.head });
      const applied = await expectFold(journal, consumerId);

      const handle = stack.client.workflow.getHandle<typeof backfillWorkflow>(backfillWorkflowId(consumerId));
      const metadata = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
      expect(metadata.currentDetails).toContain(`## Backfill \`${consumerId}\`: completed`);
      expect(metadata.currentDetails).toContain(`| applied position | ${journal.history.head} (version`);
      expect(metadata.currentDetails).toContain(`| progress | applied ${head} of ${head} |`);
      expect(metadata.currentDetails).toContain(`| target | ${head} (the source's head at the first page, `);

      const status = await run('status', '--consumer', consumerId);
      expect(status, status.stderr).toMatchObject({ code: 0 });
      expect(status.stdout).toContain('backfill (paginated history source)');
      expect(status.stdout).toMatch(new RegExp(`applied position\\s+${journal.history.head}\\b`));
      const eventsApplied = (
        await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM event_receipts WHERE consumer_id = $1 AND outcome = 'applied'`,
          [consumerId],
        )
      ).rows[0]!.n;
      expect(status.stdout).toMatch(new RegExp(`events applied\\s+${formatCount(eventsApplied)}\n`));
      expect(status.stdout).toMatch(new RegExp(`progress\\s+applied ${head} of ${head}\n`));
      expect(status.stdout).toMatch(new RegExp(`target\\s+${head} \\(the source's head at the first page, `));
      expect(status.stdout).toMatch(/ended\s+reached its target/);
      await waitFor(
        async () => {
          const listed = await run('list', '--consumer', consumerId);
          return /bf-cli\s+backfill\s+completed\s+COMPLETED/.test(listed.stdout);
        },
        { description: 'list to show the completed backfill', timeoutMs: 20_000 },
      );

      // A finished backfill runs again from the saved cursor: nothing new, nothing changed.
      const second = await run('backfill', '--consumer', consumerId, '--filter', '{}');
      expect(second, second.stderr).toMatchObject({ code: 0 });
      expect(second.stdout).toContain(`completed: reached its target ${head}`);
      expect(second.stdout).toMatch(/new 0 {2}recognised \d+/);
      expect(await dumpState(db.pool, consumerId)).toEqual(applied.state);
      for (const result of [first, second, status]) expect(result.stdout + result.stderr).not.toContain(API_KEY);
    });
  });

  it('a held quarantine waits for a decision: retry holds it again (reversible), release_terminal completes', async () => {
    const transitions = [
      { events: [trade('q-1', 'm1', '0.5', '10')] },
      { events: [trade('q-2', 'm1', '0.5', '20')] },
      // A correction of an entity never seen: held quarantine blocks its chunk.
      { events: [correction('ghost', 'm1', 2, '0.5', '30')] },
      { events: [trade('q-3', 'm2', '0.5', '40')] },
      { events: [correction('q-1', 'm1', 2, '0.6', '10')] },
    ];
    const journal = journalOf(transitions, 62);
    await withConsumerStack(res, db, { journal, env: PAGE_ENV }, async (stack) => {
      const run = cli(stack);
      const consumerId = 'bf-held';
      const handle = await startBackfill(stack, { consumerId });
      const held = await waitForBackfill(
        handle,
        'the held quarantine',
        (s) => s.phase === 'awaiting_quarantine_decision',
      );
      expect(held.stop?.reason).toContain('ghost');
      expect(held.stop?.resolveWith).toContain(
        `resolve-quarantine --consumer ${consumerId} --decision release_terminal`,
      );
      expect((await loadPageProgress(db.pool, consumerId))?.appliedPosition).toBeLessThan(3);
      const metadata = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
      expect(metadata.currentDetails).toContain('awaiting_quarantine_decision');
      expect(metadata.currentDetails).toContain('resolve-quarantine');

      // The validator refuses what this phase cannot take, before anything reaches history.
      const wrong = await run(
        'resolve-gap',
        '--consumer',
        consumerId,
        '--decision',
        'from_floor',
        '--actor',
        'op',
        '--reason',
        'x',
      );
      expect(wrong.code).toBe(1);
      expect(wrong.stderr).toContain('is awaiting_quarantine_decision, not awaiting_gap_decision');

      const retry = await run(
        'resolve-quarantine',
        '--consumer',
        consumerId,
        '--decision',
        'retry',
        '--actor',
        'op',
        '--reason',
        'after upgrade',
      );
      expect(retry, retry.stderr).toMatchObject({ code: 0 });
      // Retried, still unknown: held again, nothing past it applied.
      await waitForBackfill(
        handle,
        'held again after retry',
        (s) => s.phase === 'awaiting_quarantine_decision' && s.runs > held.runs,
      );
      expect((await loadPageProgress(db.pool, consumerId))?.appliedPosition).toBeLessThan(3);

      const release = await run(
        'resolve-quarantine',
        '--consumer',
        consumerId,
        '--decision',
        'release_terminal',
        '--actor',
        'op',
        '--reason',
        'bad upstream row',
      );
      expect(release, release.stderr).toMatchObject({ code: 0 });
      const done = await handle.result();
      expect(done.phase).toBe('completed');
      expect(done.counters.quarantined).toBe(1);
      await expectFold(journal, consumerId);
      const state = await dumpState(db.pool, consumerId);
      expect(state.quarantine.map((q) => [q.eventId, q.disposition])).toEqual([[expect.any(String), 'terminal']]);
    });
  });

  it('a refused cursor waits for a gap decision: live_cut is refused, from_floor completes with the fold', async () => {
    const journal = Journal.generate({ seed: 63, transitions: 20 });
    await withConsumerStack(res, db, { journal, env: PAGE_ENV }, async (stack) => {
      const run = cli(stack);
      const consumerId = 'bf-reset';
      const handle = await startBackfill(stack, { consumerId, pagesPerRun: 1 });
      await waitFor(async () => ((await loadPageProgress(db.pool, consumerId))?.appliedPosition ?? 0) > 0, {
        description: 'a first page applied',
      });
      stack.server.faults.pageExpired = true;
      const waiting = await waitForBackfill(handle, 'the gap decision', (s) => s.phase === 'awaiting_gap_decision');
      expect(waiting.stop?.reason).toContain('reset_required (cursor_expired)');
      const cursor = (await loadPageProgress(db.pool, consumerId))?.resumeCursor;
      expect(cursor).not.toBeNull();

      const liveCut = await run(
        'resolve-gap',
        '--consumer',
        consumerId,
        '--decision',
        'live_cut',
        '--actor',
        'op',
        '--reason',
        'x',
      );
      expect(liveCut.code).toBe(1);
      expect(liveCut.stderr).toContain('has no live cut');

      const fromFloor = await run(
        'resolve-gap',
        '--consumer',
        consumerId,
        '--decision',
        'from_floor',
        '--actor',
        'op',
        '--reason',
        'accept',
      );
      expect(fromFloor, fromFloor.stderr).toMatchObject({ code: 0 });
      expect((await handle.result()).phase).toBe('completed');
      await expectFold(journal, consumerId);
      const { rows } = await db.pool.query<{ decision: string; replaced_token: string }>(
        `SELECT decision, replaced_token FROM decisions WHERE consumer_id = $1 AND kind = 'gap'`,
        [consumerId],
      );
      expect(rows).toEqual([{ decision: 'from_floor', replaced_token: cursor }]);
    });
  });

  it('a non-advancing source is backed off, never spun; pause and resume; zero-item pages advance', async () => {
    // One transition in five touches the filtered market; pages scan 3 transitions, so most pages hold no event.
    const journal = journalOf(
      Array.from({ length: 20 }, (_, i) => ({
        events: [trade(`z-${i}`, i % 5 === 0 ? 'm-rare' : 'm-common', '0.5', String(10 + i))],
      })),
      64,
    );
    await withConsumerStack(
      res,
      db,
      { journal, env: PAGE_ENV, server: { faults: { pageScanLimit: 3 } } },
      async (stack) => {
        const consumerId = 'bf-stuck';
        stack.server.faults.pageNonAdvancing = 'every_page';
        const handle = await startBackfill(stack, { consumerId, filter: { markets: ['m-rare'] } });
        const stuck = await waitForBackfill(
          handle,
          'backoff after a non-advancing page',
          (s) => s.phase === 'backoff' && (s.lastError ?? '').startsWith('non_advancing'),
        );
        // The first page (no cursor yet) cannot repeat a cursor; every page after it does, and none is applied.
        expect(stuck.progress?.appliedPosition).toBe(1);
        // Each round asks a bounded number of times, then waits on a durable timer.
        await waitForBackfill(handle, 'two more rounds', (s) => s.runs >= stuck.runs + 2);
        const rounds = await handle.query(backfillStatusQuery);
        const perRun = Number(PAGE_ENV.RECONNECT_MAX_ATTEMPTS) + 1;
        // (+1: the first page, asked without a cursor, which cannot repeat one.)
        expect(rounds.counters.requests).toBeLessThanOrEqual(rounds.runs * perRun + 1);
        expect(rounds.counters.applied).toBe(stuck.counters.applied);
        expect((await loadPageProgress(db.pool, consumerId))?.appliedPosition).toBe(1);

        await handle.signal(pauseSignal, { actor: 'op', reason: 'look at the source' });
        const paused = await waitForBackfill(handle, 'paused', (s) => s.phase === 'paused');
        expect(paused.stop?.resolveWith).toContain(`resume --consumer ${consumerId}`);
        stack.server.faults.pageNonAdvancing = undefined;
        await handle.signal(resumeSignal, { actor: 'op', reason: 'source fixed' });
        const done = await handle.result();
        expect(done.phase).toBe('completed');
        expect(done.counters.pages).toBeGreaterThanOrEqual(Math.ceil(journal.history.head / 3));
        const saved = await savedEffects(db.pool, consumerId);
        expect(saved.executions.map((x) => x.entityId)).toEqual(['z-0', 'z-10', 'z-15', 'z-5']);
        expect((await loadPageProgress(db.pool, consumerId))?.appliedPosition).toBe(16);
      },
    );
  });

  it('--then-stream against a live source: completes at the target fixed when it started, hands over once, the stream follows live; every event once', async () => {
    const journal = Journal.generate({ seed: 65, transitions: 120 });
    await withConsumerStack(res, db, { journal, env: PAGE_ENV }, async (stack) => {
      const run = cli(stack);
      const consumerId = 'bf-handover';
      const headAtStart = journal.head;
      // 20 live transitions a second all along: before this change the backfill paged them one or two at a time,
      // never met a repeated cursor, and never handed over.
      journal.startLiveAppends(20);
      try {
        const started = await run('backfill', '--consumer', consumerId, '--filter', '{}', '--then-stream', '--detach');
        expect(started, started.stderr).toMatchObject({ code: 0 });
        expect(started.stdout).toContain('detached');
        const backfill = stack.client.workflow.getHandle<typeof backfillWorkflow>(backfillWorkflowId(consumerId));
        stack.track(backfill);
        const ended = await backfill.result();
        const target = ended.target!;
        expect(target).toMatchObject({ source: 'head', historyId: journal.historyId });
        expect(target.position).toBeGreaterThanOrEqual(headAtStart);
        expect(ended.handover).toMatchObject({ workflowId: consumerWorkflowId(consumerId), target: target.position });
        const handedOverAt = ended.handover!.appliedPosition;
        expect(handedOverAt).toBeGreaterThanOrEqual(target.position);
        expect(ended.ending).toContain(`handed over to ${consumerWorkflowId(consumerId)} after applied position`);
        expect(ended.ending).toContain(`(target ${target.position})`);
        // Full pages up to the target (PAGE_LIMIT events each), then the handover: no page per live transition.
        expect(ended.counters.pages).toBeLessThanOrEqual(
          Math.ceil(eventsThrough(journal, handedOverAt) / Number(PAGE_ENV.PAGE_LIMIT)) + 1,
        );
        // The handover is in the backfill's history, once: one activity, one child start.
        const record = await handoverRecord(backfill);
        expect(record).toMatchObject({
          scheduled: 1,
          completedAttempts: [1],
          childStarts: [consumerWorkflowId(consumerId)],
        });
        expect(record.results).toEqual([{ kind: 'handed_over', appliedPosition: handedOverAt }]);
        expect(await loadPageProgress(db.pool, consumerId)).toBeNull();

        // The live consumer replays from the floor and then follows the live appends.
        const consumer = stack.client.workflow.getHandle<typeof consumerWorkflow>(consumerWorkflowId(consumerId));
        stack.track(consumer);
        const later = journal.head + 20;
        await waitFor(async () => ((await loadCommitted(db.pool, consumerId))?.position ?? 0) >= later, {
          description: `the live consumer to follow the live appends past ${later}`,
          timeoutMs: 60_000,
        });
      } finally {
        journal.stopLiveAppends();
      }
      await waitFor(async () => (await loadCommitted(db.pool, consumerId))?.position === journal.head, {
        description: `the live consumer to commit the head ${journal.head}`,
        timeoutMs: 60_000,
      });
      // The database equals the reference fold at the stream's committed position: every event once, none skipped.
      const after = await expectFold(journal, consumerId);
      expect(after.receiptIds).toHaveLength(distinctEventIds(journal));
      // The stream started at the floor: everything the backfill applied came again, and its receipts recognised it.
      const subscription = stack.server.subscriptions.find((s) => s.consumerId === consumerId);
      expect(subscription?.mode).toBe('from_floor');
      const consumer = stack.client.workflow.getHandle<typeof consumerWorkflow>(consumerWorkflowId(consumerId));
      expect((await consumer.query(statusQuery)).phase).toBe('streaming');
      await waitFor(
        async () => {
          const listed = await run('list', '--consumer', consumerId);
          return /bf-handover\s+stream\s+streaming\s+RUNNING/.test(listed.stdout) && listed.stdout;
        },
        { description: 'list to show the live consumer', timeoutMs: 20_000 },
      );
    });
  });

  it('--tail has no target: at the head it waits on a growing timer and says so, one request a round; --until stops at its position', async () => {
    const journal = Journal.generate({ seed: 66, transitions: 30 });
    await withConsumerStack(res, db, { journal, env: PAGE_ENV }, async (stack) => {
      const run = cli(stack);
      const consumerId = 'bf-tail';
      const handle = await startBackfill(stack, {
        consumerId,
        tail: true,
        tuning: { backoffInitialMs: 200, backoffMaxMs: 800 },
      });
      const atHead = await waitForBackfill(
        handle,
        'waiting at the head',
        (s) => s.phase === 'at_head' && s.waiting !== null && s.progress?.appliedPosition === journal.head,
      );
      expect(atHead.waiting?.reason).toMatch(/^tailing: at the source's head \d+ \(applied \d+\); the next page in/);
      expect(atHead.target).toBeNull();
      const metadata = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
      expect(metadata.currentDetails).toContain('**At the head until');
      expect(metadata.currentDetails).toContain('| target | none: tailing');
      // Rounds at the head are short here (200-800 ms): a status call may land in a round's page run, so the
      // check is that one at the head says so.
      const status = await waitFor(
        async () => {
          const answer = await run('status', '--consumer', consumerId);
          return /phase\s+at_head/.test(answer.stdout) ? answer : undefined;
        },
        { description: 'status at the head', timeoutMs: 60_000 },
      );
      expect(status.stdout).toMatch(/target\s+none: tailing/);
      expect(status.stdout).toMatch(/at the head\s+tailing: at the source's head/);

      // Nothing new: each round asks once (the repeated cursor says "at the head"), and the waits grow.
      const rounds = await waitForBackfill(handle, 'three more rounds at the head', (s) => s.runs >= atHead.runs + 3);
      expect(rounds.counters.requests - atHead.counters.requests).toBe(rounds.runs - atHead.runs);
      expect(rounds.headWaits).toBeGreaterThan(atHead.headWaits!);

      // The history grows: the next round applies it, then waits again.
      for (let i = 0; i < 5; i++) journal.appendGenerated();
      await waitForBackfill(
        handle,
        'the new transitions applied, at the head again',
        (s) => s.phase === 'at_head' && s.progress?.appliedPosition === journal.head,
      );
      await expectFold(journal, consumerId);
      expect((await handle.describe()).status.name).toBe('RUNNING');

      // --until: complete once the applied position reaches the position, however far the history goes.
      const until = await run('backfill', '--consumer', 'bf-until', '--filter', '{}', '--until', '12');
      stack.track(stack.client.workflow.getHandle(backfillWorkflowId('bf-until')));
      expect(until, until.stderr).toMatchObject({ code: 0 });
      expect(until.stdout).toContain('target 12');
      expect(until.stdout).toMatch(/completed: reached its target 12 \(given with --until\), applied position \d+/);
      const applied = (await loadPageProgress(db.pool, 'bf-until'))!.appliedPosition;
      expect(applied).toBeGreaterThanOrEqual(12);
      expect(applied).toBeLessThan(journal.head);
    });
  });

  it('every recorded history replays and holds no API key', async () => {
    await expectReplayable();
  });
});
