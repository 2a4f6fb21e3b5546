// What an operator sees is true (issue 9 §3): while a lease streams, the workflow's Current Details (the Temporal
// UI) refreshes within 30 s with the live position, not only when the lease ends; lag is head − committed position
// in Current Details and in `status`; paused, both show the same reading with its time, and a rate of 0. The last
// commit, the version and the totals refresh with the same reading (issue 19): each held against the database
// during the lease and once paused. The consumer's whale alerts (pending, dead, the oldest pending one's age) ride
// on the same progress report.
import { describe, expect, it } from 'vitest';
import type { ActivityDeps } from '../../activities/index.js';
import { PROGRESS_REPORT_EVERY_MS } from '../../activities/progress-reporter.js';
import type { ConsumerReport } from '../../cli/consumers.js';
import { loadCommitted } from '../../db/index.js';
import type { ConsumerTotals } from '../../workflows/consumer-state.js';
import { streamHeartbeat } from '../../cli/consumers.js';
import { statusQuery } from '../../workflows/definitions.js';
import { runCli } from '../support/cli.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import { temporalTarget, waitFor } from '../support/temporal.js';
import { journalOf, trade, waitForPhase, withConsumerStack, within, type ConsumerHandle } from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();

interface Figures {
  position: number;
  head: number;
  lag: number;
  rate: string;
  asOf: string;
}

type Store = NonNullable<ActivityDeps['store']>;

/** What `status --json` prints: the report and the totals. */
type StatusJson = ConsumerReport & { totals: ConsumerTotals };

const count = (text: string): number => Number(text.replace(/,/g, ''));

async function currentDetails(handle: ConsumerHandle): Promise<string> {
  const metadata = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  return metadata.currentDetails ?? '';
}

function detailsFigures(details: string): Figures | null {
  const row = /\| position \| ([\d,]+), head ([\d,]+), lag ([\d,]+) \(as of (\S+ UTC)\) \|/.exec(details);
  const rate = /\| rate \| ([\d.,]+) pos\/s over the last minute/.exec(details);
  if (!row || !rate) return null;
  return { position: count(row[1]!), head: count(row[2]!), lag: count(row[3]!), rate: rate[1]!, asOf: row[4]! };
}

/** Current Details' last commit (its time of day), version and database totals. */
function detailsCommits(details: string): { lastCommit: string; version: number; checkpoints: number; events: number } {
  const commit = /\| last commit \| (\S+ UTC), version ([\d,]+);/.exec(details);
  const totals = /\| totals \| ([\d,]+) checkpoints, ([\d,]+) events,/.exec(details);
  if (!commit || !totals) throw new Error(`no last commit or totals row in Current Details:\n${details}`);
  return {
    lastCommit: commit[1]!,
    version: count(commit[2]!),
    checkpoints: count(totals[1]!),
    events: count(totals[2]!),
  };
}

/** Seconds from one "hh:mm:ss UTC" to a later one (within a day). */
function secondsBetween(from: string, to: string): number {
  const seconds = (t: string) =>
    t
      .slice(0, 8)
      .split(':')
      .reduce((sum, part) => sum * 60 + Number(part), 0);
  return (seconds(to) - seconds(from) + 86_400) % 86_400;
}

function statusFigures(text: string): Figures {
  const row =
    /progress\s+position ([\d,]+) {2}head ([\d,]+) {2}lag ([\d,]+) {2}([\d.,]+) pos\/s {2}as of (\S+ UTC)/.exec(text);
  if (!row) throw new Error(`no progress row in status output:\n${text}`);
  return { position: count(row[1]!), head: count(row[2]!), lag: count(row[3]!), rate: row[4]!, asOf: row[5]! };
}

describe('consumer progress as the Temporal UI and `status` show it', () => {
  const res = useResources();

  it('refreshes Current Details while streaming; lag is head − committed everywhere; paused shows rate 0', async () => {
    const consumerId = 'progress-1';
    const total = 200;
    const journal = journalOf(
      Array.from({ length: total }, (_, i) => ({ events: [trade(`p${i}`, 'mA', '0.5', '1')] })),
    );
    // Commits are slowed (800 ms per checkpoint) until the test has seen a live refresh, so the replay is still
    // under way, behind the head its hello announced, when the workflow hears of it. A small staging bound keeps
    // the checkpoints waiting behind a commit (committed together) to a few, so the replay stays paced.
    let slow = true;
    const store = (real: Store): Store => ({
      acquireLease: real.acquireLease,
      async commitCheckpoints(plans) {
        if (slow) await new Promise((resolve) => setTimeout(resolve, 800 * plans.length));
        return real.commitCheckpoints(plans);
      },
    });
    await withConsumerStack(
      res,
      db,
      { journal, store, env: { STAGING_MAX_EVENTS: '4' } },
      async ({ server, taskQueue, startConsumer }) => {
        const run = (...args: string[]) =>
          runCli(
            {
              TEMPORAL_ADDRESS: temporalTarget().address,
              TEMPORAL_NAMESPACE: temporalTarget().namespace,
              TASK_QUEUE: taskQueue,
              DATABASE_URL: db.url,
            },
            ...args,
          );
        // One lease for the whole test: any refresh of Current Details comes from the streaming run's signals.
        const handle = await startConsumer({ consumerId, leaseMs: 600_000 });
        const appliedUpTo = async (position: number): Promise<number> => {
          const { rows } = await db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM event_receipts
              WHERE consumer_id = $1 AND outcome = 'applied' AND position <= $2`,
            [consumerId, position],
          );
          return rows[0]!.n;
        };
        await within(
          server.waitForAck((a) => a.consumerId === consumerId && a.position >= 2),
          60_000,
          'the first ACK',
        );

        const liveDetails = (description: string, accept: (figures: Figures) => boolean) =>
          waitFor(
            async () => {
              const figures = detailsFigures(await currentDetails(handle));
              return figures !== null && accept(figures) && figures;
            },
            { description, timeoutMs: 30_000, intervalMs: 500 },
          );
        // The explicit first start's lease ends at its first commit (position 2); the next one runs to the end.
        const first = await liveDetails('Current Details with a live position behind the head', (f) => f.position > 2);
        const next = await liveDetails(
          'Current Details refreshed within 30 s',
          (f) => f.asOf !== first.asOf && f.position > first.position,
        );
        expect((await handle.query(statusQuery)).runs).toBe(1); // no lease ended since: the refreshes came mid-lease
        for (const live of [first, next]) {
          expect(live.head).toBe(total);
          expect(live.lag).toBe(live.head - live.position);
          expect(live.lag).toBeGreaterThan(0);
        }
        // The last commit, the version and the totals refreshed with the same reading: a commit within the progress
        // interval before it, and exactly what the database held at its position (no decision moved the version;
        // every event of this journal applies, one per position).
        const refreshed = await currentDetails(handle);
        const reading = detailsFigures(refreshed)!;
        const commits = detailsCommits(refreshed);
        expect(secondsBetween(commits.lastCommit, reading.asOf)).toBeLessThanOrEqual(PROGRESS_REPORT_EVERY_MS / 1000);
        expect(commits.checkpoints).toBe(commits.version);
        expect(commits.events).toBe(await appliedUpTo(reading.position));
        expect(commits.events).toBe(reading.position);
        expect(commits.version).toBeLessThanOrEqual((await loadCommitted(db.pool, consumerId))!.version);

        const streaming = statusFigures((await run('status', '--consumer', consumerId)).stdout);
        expect(streaming.lag).toBe(streaming.head - streaming.position);
        // `status --json` mid-lease: its totals are the database's, read with its version and position.
        const midLease = JSON.parse((await run('status', '--consumer', consumerId, '--json')).stdout) as StatusJson;
        const savedThen = midLease.database!.state;
        expect(midLease.totals).toMatchObject({
          version: savedThen.version,
          checkpointsCommitted: savedThen.version,
          eventsApplied: savedThen.position,
        });
        const heartbeat = streamHeartbeat(await handle.describe());
        expect(heartbeat?.headPosition).toBeGreaterThanOrEqual(heartbeat?.position ?? 0);

        slow = false;
        await within(
          server.waitForAck((a) => a.consumerId === consumerId && a.position === total),
          60_000,
          'the ACK of the last position',
        );
        expect((await run('pause', '--consumer', consumerId, '--actor', 'ops', '--reason', 'look')).code).toBe(0);
        await waitForPhase(handle, 'paused');
        for (const i of [1, 2, 3]) journal.append({ events: [trade(`late${i}`, 'mA', '0.5', '1')] });

        // Paused, nothing is consumed: both show the last reading with its time, and a rate of 0.
        const details = detailsFigures(await currentDetails(handle));
        const text = await run('status', '--consumer', consumerId);
        expect(text, text.stderr).toMatchObject({ code: 0 });
        const paused = statusFigures(text.stdout);
        expect(details).toEqual(paused);
        expect(paused).toMatchObject({ position: total, head: total, lag: 0, rate: '0.0' });
        expect(text.stdout).toContain("(the workflow's last reading");
        const report = JSON.parse((await run('status', '--consumer', consumerId, '--json')).stdout) as StatusJson;
        expect(report.status?.progress).toMatchObject({ position: total, head: total });
        // Stopped, Current Details and `status --json` hold the database's version and applied events exactly.
        const saved = (await loadCommitted(db.pool, consumerId))!;
        const applied = await appliedUpTo(total);
        expect(applied).toBe(total);
        expect(report.totals).toMatchObject({
          version: saved.version,
          checkpointsCommitted: saved.version,
          eventsApplied: applied,
        });
        expect(detailsCommits(await currentDetails(handle))).toMatchObject({
          version: saved.version,
          checkpoints: saved.version,
          events: applied,
        });
      },
    );
  });

  it("shows the consumer's alert figures in Current Details while it streams, as `status` does", async () => {
    const consumerId = 'progress-alerts';
    // 0.5 × 2 = 1 USD reaches the threshold: every trade is a whale, alerting on replay too (a from_floor start).
    const journal = journalOf(Array.from({ length: 6 }, (_, i) => ({ events: [trade(`pa${i}`, 'mA', '0.5', '2')] })));
    // An alert that failed for good before this run; no dispatcher runs here, so the new ones wait as pending.
    await db.pool.query(
      `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, attempts, last_error)
       VALUES ($1, 'whale_alert:old', 'old', 'whale_alert', '{}', 'dead', 10, 'webhook http://127.0.0.1:9 answered HTTP 500')`,
      [consumerId],
    );
    await withConsumerStack(
      res,
      db,
      { journal, env: { WHALE_ALERT_MIN_NOTIONAL: '1', WHALE_ALERT_ON_REPLAY: 'true' } },
      async ({ server, taskQueue, startConsumer }) => {
        // Short leases (the harness's): each lease's first report goes out at once, not after the 20 s throttle.
        const handle = await startConsumer({ consumerId });
        await within(
          server.waitForAck((a) => a.consumerId === consumerId && a.position === 6),
          60_000,
          'the ACK of the last position',
        );
        // The first report of a lease that starts after the last commit carries all six.
        const row = await waitFor(
          async () => {
            const found = /\| alerts \| (6 pending \(oldest \S+\), 1 dead) \(as of \S+ UTC\) \|/.exec(
              await currentDetails(handle),
            );
            return found?.[1] ?? false;
          },
          { description: 'Current Details with 6 pending and 1 dead alert', timeoutMs: 30_000, intervalMs: 250 },
        );
        expect(row).toMatch(/^6 pending \(oldest \d+s\), 1 dead$/);
        expect((await handle.query(statusQuery)).alerts).toMatchObject({ pending: 6, dead: 1 });
        const text = await runCli(
          {
            TEMPORAL_ADDRESS: temporalTarget().address,
            TEMPORAL_NAMESPACE: temporalTarget().namespace,
            TASK_QUEUE: taskQueue,
            DATABASE_URL: db.url,
          },
          'status',
          '--consumer',
          consumerId,
        );
        expect(text, text.stderr).toMatchObject({ code: 0 });
        expect(text.stdout).toMatch(/alerts\s+6 pending \(oldest \d+s\), 1 dead/);
      },
    );
  });

  it('replays every recorded history without nondeterminism and no history holds the API key', async () => {
    await expectReplayable();
  });
});
